package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
)

// Operations on many VMs (issue 13 (docs/history.md)): `vmgate node evacuate`, `vmgate bulk`,
// `vmgate op list|show|watch|cancel`, and `vmgate vm suspend|resume`. Starting
// one prints its plan (stdout), then one progress line per running item
// (stderr) and the summary (stdout); Ctrl-C stops watching, never the operation.

// opStart are the flags of the commands that start an operation.
type opStart struct {
	MaxParallel int  `name:"max-parallel" placeholder:"N" help:"At most N VMs at PVE at once (1 to 16; default: 2 for an evacuation, 4 for a bulk action)."`
	DryRun      bool `help:"Print the plan and start nothing."`
	StopOnError bool `help:"Start no further VM once one has failed."`
	NoWatch     bool `help:"Print the plan and the operation's id, and return at once."`
}

type nodeEvacuateCmd struct {
	conn
	output
	opStart
	Cluster        string   `arg:"" placeholder:"CLUSTER" help:"The cluster, by id or name."`
	Node           string   `arg:"" help:"The node to empty."`
	Target         []string `placeholder:"NODE" help:"Only this node may take VMs (repeat for several; default: every other online node)."`
	WithLocalDisks bool     `help:"Copy local disks too (without it a VM with one is skipped)."`
	NoStopped      bool     `help:"Leave stopped VMs where they are."`
	Type           string   `enum:",qemu,lxc" default:"" help:"Only VMs (qemu) or only containers (lxc); default both."`
}

func (c *nodeEvacuateCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := clusterID(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		includeStopped := !c.NoStopped
		req := client.EvacuateRequest{DryRun: c.DryRun, WithLocalDisks: c.WithLocalDisks, IncludeStopped: &includeStopped,
			StopOnError: c.StopOnError, Targets: c.Target, MaxParallel: c.MaxParallel, Type: c.Type}
		return launch(ctx, s, c.output, c.opStart, true, func(ctx context.Context) (client.Launched, error) {
			return s.Evacuate(ctx, id, c.Node, req)
		})
	})
}

type bulkCmd struct {
	conn
	output
	opStart
	Action  string  `arg:"" enum:"start,stop,reboot,suspend,resume" placeholder:"ACTION" help:"start, stop, reboot, suspend or resume."`
	Cluster string  `arg:"" placeholder:"CLUSTER" help:"The cluster, by id or name."`
	VMID    []int64 `name:"vmid" placeholder:"ID" help:"This VM (repeat for several); or choose them with --node, --tag, --status."`
	Node    string  `help:"The VMs on this node."`
	Tag     string  `help:"The VMs with this tag."`
	Status  string  `enum:",running,stopped" default:"" help:"The VMs in this state: running or stopped."`
	Type    string  `enum:",qemu,lxc" default:"" help:"Only VMs (qemu) or only containers (lxc)."`
	Force   bool    `help:"stop: power off at once instead of a graceful shutdown."`
	ToDisk  bool    `name:"to-disk" help:"suspend: hibernate (save the state to disk) instead of pausing."`
}

func (c *bulkCmd) Run() error {
	sel := map[string]string{}
	for k, v := range map[string]string{"node": c.Node, "tag": c.Tag, "status": c.Status, "type": c.Type} {
		if v != "" {
			sel[k] = v
		}
	}
	switch {
	case len(c.VMID) == 0 && len(sel) == 0:
		return cli.UsageErrorf("choose the VMs: --vmid, or --node, --tag, --status")
	case len(c.VMID) > 0 && len(sel) > 0:
		return cli.UsageErrorf("give --vmid or --node/--tag/--status, not both")
	case c.Force && c.Action != "stop":
		return cli.UsageErrorf("--force applies to stop only")
	case c.ToDisk && c.Action != "suspend":
		return cli.UsageErrorf("--to-disk applies to suspend only")
	}
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := clusterID(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		req := client.BulkRequest{DryRun: c.DryRun, StopOnError: c.StopOnError, Force: c.Force, ToDisk: c.ToDisk,
			MaxParallel: c.MaxParallel, VMIDs: c.VMID}
		if len(c.VMID) == 0 {
			req.Selector = &client.BulkSelector{Node: c.Node, Tag: c.Tag, Status: c.Status, Type: c.Type}
		}
		return launch(ctx, s, c.output, c.opStart, false, func(ctx context.Context) (client.Launched, error) {
			return s.Bulk(ctx, id, c.Action, req)
		})
	})
}

// operationNotAnswered is err, or, when the user interrupted the request
// before vmgate answered, the exit that says the operation may have started.
func operationNotAnswered(err error) error {
	if errors.Is(err, context.Canceled) {
		return &cli.ExitError{Code: cli.ExitInterrupted, Msg: "interrupted before vmgate answered: the operation may have started",
			Hint: "look for it: vmgate op list"}
	}
	return err
}

// launch starts an operation (or plans it, with --dry-run), prints the plan and
// follows the operation to its end.
func launch(ctx context.Context, s *cli.Session, o output, st opStart, targets bool,
	start func(context.Context) (client.Launched, error)) error {
	l, err := start(ctx)
	if err != nil {
		return operationNotAnswered(err)
	}
	f, err := cli.ChooseFormat(o.Output, os.Stdout)
	if err != nil {
		return err
	}
	if f == cli.JSON && (st.DryRun || st.NoWatch) {
		return cli.WriteJSON(os.Stdout, l.JSON())
	}
	if f != cli.JSON {
		plan := cli.PlanTable(l.Plan)
		plan.Wide = f == cli.Wide
		if err := plan.Write(os.Stdout); err != nil {
			return err
		}
		if f != cli.Wide {
			for _, n := range cli.SkipNotes(l.Plan) {
				show("%s", n)
			}
		}
		if targets && len(l.Plan.Targets) > 0 {
			show("")
			tt := cli.TargetsTable(l.Plan)
			tt.Wide = f == cli.Wide
			if err := tt.Write(os.Stdout); err != nil {
				return err
			}
		}
	}
	if st.DryRun {
		return nil
	}
	if st.NoWatch {
		show("%d", l.OperationID)
		return nil
	}
	say("operation %d started; follow it with: vmgate op watch %d", l.OperationID, l.OperationID)
	return watchOperation(ctx, s, o, l.OperationID, &l.Plan)
}

// watchOperation follows an operation to its end: progress on stderr, then the
// summary (or, with -o json, the final operation) on stdout. Exit 1 unless it
// ended done.
func watchOperation(ctx context.Context, s *cli.Session, o output, id int64, plan *client.Plan) error {
	view := cli.NewOperationView(os.Stderr, cli.IsTerminal(os.Stderr))
	if plan != nil {
		view.Shown(*plan)
	}
	op, err := cli.WatchOperation(ctx, s.Client, id, cli.WatchOptions{Progress: os.Stderr, Terminal: cli.IsTerminal(os.Stderr)},
		view.Notice, view.Show)
	view.Finish()
	if errors.Is(err, context.Canceled) {
		return &cli.ExitError{Code: cli.ExitInterrupted, Msg: fmt.Sprintf("watching stopped; operation %d goes on in vmgate", id),
			Hint: fmt.Sprintf("follow it again: vmgate op watch %d (or stop it: vmgate op cancel %d)", id, id)}
	}
	if err != nil {
		return err
	}
	return watched(o, op, id, cli.OperationSummary(op))
}

// watched prints a followed operation's end: its summary line (or, with -o
// json, the operation as vmgate answered it) on stdout; exit 1 unless it ended
// done.
func watched(o output, op client.Operation, id int64, summary string) error {
	f, err := cli.ChooseFormat(o.Output, os.Stdout)
	if err != nil {
		return err
	}
	if f == cli.JSON {
		var out any = op
		if op.JSON() != nil {
			out = op.JSON() // vmgate's own answer, nulls and all, as op show prints it
		}
		if err := cli.WriteJSON(os.Stdout, out); err != nil {
			return err
		}
	} else {
		show("%s", summary)
	}
	if op.Status != "done" {
		return &cli.ExitError{Code: cli.ExitFailed, Msg: fmt.Sprintf("operation %d ended %s", id, op.Status),
			Hint: fmt.Sprintf("its items: vmgate op show %d", id)}
	}
	return nil
}

type opCmd struct {
	List   opListCmd   `cmd:"" help:"List operations on many VMs, newest first."`
	Show   opShowCmd   `cmd:"" help:"Show an operation and its VMs."`
	Watch  opWatchCmd  `cmd:"" help:"Follow an operation to its end."`
	Cancel opCancelCmd `cmd:"" help:"Cancel an operation: nothing more starts; with --abort its running migrations are stopped too."`
	Pause  opPauseCmd  `cmd:"" help:"Pause a rolling maintenance before its next step (its node stays in maintenance)."`
	Resume opResumeCmd `cmd:"" help:"Resume a paused rolling maintenance at the step it stopped at."`
}

type opListCmd struct {
	conn
	output
	Cluster string `placeholder:"ID|NAME" help:"Only this cluster."`
	Limit   int    `default:"50" help:"At most this many (1 to 200)."`
}

func (c *opListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		cid, err := optionalCluster(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		l, err := s.Operations(ctx, cid, c.Limit)
		if err != nil {
			return err
		}
		names := clusterNames(ctx, s)
		return printList(c.output, l, func(list []client.Operation) cli.TableOf { return cli.OperationsTable(list, names) })
	})
}

type opRef struct {
	ID int64 `arg:"" name:"id" help:"The operation's id."`
}

type opShowCmd struct {
	conn
	output
	opRef
}

func (c *opShowCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		op, err := s.Operation(ctx, c.ID)
		if err != nil {
			return err
		}
		return c.print(op.JSON(), func() cli.TableOf {
			if op.Kind == "rolling_maintenance" {
				say("%s", cli.RollingSummary(op))
				if op.Rolling != nil && op.Rolling.Paused != nil {
					say("paused: %s", cli.Escape(*op.Rolling.Paused))
				}
				return cli.RollingNodesTable(op)
			}
			say("%s", cli.OperationSummary(op))
			return cli.ItemsTable(op)
		})
	})
}

type opWatchCmd struct {
	conn
	output
	opRef
}

func (c *opWatchCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		if op, err := s.Operation(ctx, c.ID); err == nil && op.Kind == "rolling_maintenance" {
			return watchRolling(ctx, s, c.output, c.ID)
		}
		return watchOperation(ctx, s, c.output, c.ID, nil)
	})
}

type opCancelCmd struct {
	conn
	opRef
	Abort bool `help:"Also stop the running migrations through PVE (their VMs stay where they were)."`
}

func (c *opCancelCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		op, err := s.CancelOperation(ctx, c.ID, c.Abort)
		if err != nil {
			return err
		}
		what := "nothing more starts; the running items finish"
		if c.Abort {
			what = "nothing more starts; the running migrations are being stopped"
		}
		show("operation %d cancelled: %s (%d running)", op.ID, what, op.Counts.Running)
		say("follow it to its end: vmgate op watch %d", op.ID)
		return nil
	})
}

type vmSuspendCmd struct {
	conn
	vmRef
	ToDisk bool `name:"to-disk" help:"Hibernate: save the state to disk and stop QEMU (resume brings it back)."`
	Wait   int  `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *vmSuspendCmd) Run() error {
	return power(c.conn, c.vmRef, "suspend", client.PowerOptions{Wait: &c.Wait, ToDisk: c.ToDisk})
}

type vmResumeCmd struct {
	conn
	vmRef
	Wait int `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *vmResumeCmd) Run() error {
	return power(c.conn, c.vmRef, "resume", client.PowerOptions{Wait: &c.Wait})
}
