package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
)

// Rolling maintenance (issue 20 (docs/history.md)): `vmgate cluster
// rolling-maintenance` prints the plan, a node per row, then follows the
// operation (its log on stderr, the summary on stdout); `vmgate op pause|resume`.

type clusterRollingCmd struct {
	conn
	output
	Cluster          string   `arg:"" placeholder:"CLUSTER" help:"The cluster, by id or name."`
	Node             []string `placeholder:"NODE" help:"Maintain this node (repeat, in order; default: every online node, by name)."`
	Reboot           string   `enum:"always,if-needed,never" default:"if-needed" help:"always, if-needed (a newer kernel installed, or the hook's reboot-required) or never."`
	Hook             string   `placeholder:"NAME" help:"Run this hook of the server's configuration on each node after draining it."`
	MaxParallel      int      `name:"max-parallel" placeholder:"N" help:"At most N guests of a drain or restore at PVE at once (1 to 16; default 2)."`
	NoRestore        bool     `help:"Leave the guests where the drains put them."`
	NoPauseOnFailure bool     `help:"Fail at the first failed step or gate instead of pausing."`
	WithLocalDisks   bool     `help:"Copy local disks when draining."`
	DryRun           bool     `help:"Print the plan and start nothing."`
	NoWatch          bool     `help:"Print the plan and the operation's id, and return at once."`
}

func (c *clusterRollingCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := clusterID(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		req := client.RollingRequest{Nodes: c.Node, Reboot: c.Reboot, Hook: c.Hook, MaxParallel: c.MaxParallel,
			WithLocalDisks: c.WithLocalDisks, DryRun: c.DryRun}
		if c.NoRestore {
			req.Restore = new(bool)
		}
		if c.NoPauseOnFailure {
			req.PauseOnFailure = new(bool)
		}
		l, err := s.RollingMaintenance(ctx, id, req)
		if err != nil {
			return operationNotAnswered(err)
		}
		f, err := cli.ChooseFormat(c.Output, os.Stdout)
		if err != nil {
			return err
		}
		if f == cli.JSON && (c.DryRun || c.NoWatch) {
			return cli.WriteJSON(os.Stdout, l.JSON())
		}
		if f != cli.JSON {
			t := cli.RollingPlanTable(l.Plan)
			t.Wide = f == cli.Wide
			if err := t.Write(os.Stdout); err != nil {
				return err
			}
		}
		if c.DryRun {
			return nil
		}
		if c.NoWatch {
			show("%d", l.OperationID)
			return nil
		}
		say("operation %d started; follow it with: vmgate op watch %d", l.OperationID, l.OperationID)
		return watchRolling(ctx, s, c.output, l.OperationID)
	})
}

// watchRolling follows a rolling maintenance to its end: its log on stderr,
// then its summary (or, with -o json, the final operation) on stdout. Exit 1
// unless it ended done.
func watchRolling(ctx context.Context, s *cli.Session, o output, id int64) error {
	view := cli.NewRollingView(os.Stderr)
	op, err := cli.WatchOperation(ctx, s.Client, id, cli.WatchOptions{Progress: os.Stderr, Terminal: cli.IsTerminal(os.Stderr)},
		view.Notice, view.Show)
	if errors.Is(err, context.Canceled) {
		return &cli.ExitError{Code: cli.ExitInterrupted, Msg: fmt.Sprintf("watching stopped; operation %d goes on in vmgate", id),
			Hint: fmt.Sprintf("follow it again: vmgate op watch %d (pause it: vmgate op pause %d)", id, id)}
	}
	if err != nil {
		return err
	}
	return watched(o, op, id, cli.RollingSummary(op))
}

type opPauseCmd struct {
	conn
	opRef
}

func (c *opPauseCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		op, err := s.PauseOperation(ctx, c.ID)
		if err != nil {
			return err
		}
		show("operation %d pauses before its next step; its node in maintenance stays in it", op.ID)
		say("go on with: vmgate op resume %d", op.ID)
		return nil
	})
}

type opResumeCmd struct {
	conn
	opRef
}

func (c *opResumeCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		op, err := s.ResumeOperation(ctx, c.ID)
		if err != nil {
			return err
		}
		show("operation %d goes on at the step it stopped at", op.ID)
		say("follow it: vmgate op watch %d", op.ID)
		return nil
	})
}
