package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/vmgate/vmgate/internal/cli"
	"github.com/vmgate/vmgate/internal/errs"
)

// `vmgate ct …`: LXC containers, through the API's /pve/lxc/ routes (the same
// use cases as VMs, with PVE's container rules: docs/decisions/0080).

type ctRef struct {
	Cluster string `arg:"" placeholder:"ID|NAME" help:"The cluster, by id or name."`
	Node    string `arg:"" help:"Node the container is on."`
	VMID    int64  `arg:"" name:"vmid" help:"Container id."`
}

func (v ctRef) args() string { return fmt.Sprintf("%s %s %d", v.Cluster, v.Node, v.VMID) }

type ctCmd struct {
	List    ctListCmd    `cmd:"" help:"List a cluster's containers, filtered; read in pages to the end."`
	Start   ctStartCmd   `cmd:"" help:"Start a container."`
	Stop    ctStopCmd    `cmd:"" help:"Shut a container down gracefully, or stop it at once with --force."`
	Reboot  ctRebootCmd  `cmd:"" help:"Reboot a container."`
	Migrate ctMigrateCmd `cmd:"" help:"Move a container to another node (a running one with --restart) and follow the task."`
}

type ctListCmd struct {
	conn
	output
	clusterFlag
	Node     string `help:"Only the containers on this node."`
	Status   string `help:"Only the containers in this state: running, stopped or unknown."`
	Tag      string `help:"Only the containers with this tag."`
	Q        string `name:"q" help:"Only the containers whose name holds this text (ignoring case) or whose vmid it is."`
	PageSize int    `placeholder:"N" help:"Read the list in pages of N containers (default: one answer)."`
}

func (c *ctListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := c.resolve(ctx, s)
		if err != nil {
			return err
		}
		it, err := s.CTItems(ctx, id, cli.VMFilter{Node: c.Node, Status: c.Status, Tag: c.Tag, Q: c.Q, PageSize: c.PageSize})
		if err != nil {
			return err
		}
		if !it.AsOf.IsZero() && cli.IsTerminal(os.Stderr) {
			say("%d containers, as of %s", len(it.Raw), it.AsOf.Local().Format("15:04:05.000"))
		}
		return printItems(c.output, it, cli.VMsTable)
	})
}

type ctStartCmd struct {
	conn
	ctRef
	Wait int `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *ctStartCmd) Run() error { return power(c.conn, c.ctRef, "start", false, c.Wait, nil) }

type ctRebootCmd struct {
	conn
	ctRef
	Timeout *int `help:"Seconds PVE gives the container to shut down before the start."`
	Wait    int  `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *ctRebootCmd) Run() error {
	return power(c.conn, c.ctRef, "reboot", false, c.Wait, timeoutQuery(c.Timeout))
}

type ctStopCmd struct {
	conn
	ctRef
	Force   bool `help:"Stop at once, even while a graceful shutdown hangs."`
	Timeout *int `help:"Seconds PVE gives the container to shut down (PVE's default: 60)."`
	Wait    int  `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *ctStopCmd) Run() error {
	return power(c.conn, c.ctRef, "stop", c.Force, c.Wait, timeoutQuery(c.Timeout))
}

func timeoutQuery(t *int) url.Values {
	if t == nil {
		return nil
	}
	return url.Values{"timeout": {strconv.Itoa(*t)}}
}

func (v ctRef) target() (kind, noun, cluster, node string, vmid int64) {
	return cli.KindCT, "CT", v.Cluster, v.Node, v.VMID
}

func (v ctRef) hint(err error, op string, target ...string) error {
	return ctHint(err, v, op, target...)
}

type ctMigrateCmd struct {
	conn
	ctRef
	Target        string `required:"" help:"Target node."`
	Restart       bool   `help:"Move a running container by a restart: shut down, moved, started on the target (PVE cannot move a container live)."`
	Timeout       *int   `help:"Seconds the restart gives the container to shut down (PVE's default: 180)."`
	TargetStorage string `help:"Target storage (PVE storage map)."`
	BWLimit       *int   `name:"bwlimit" help:"Bandwidth limit in KiB/s."`
	NoWatch       bool   `help:"Print the task id and return at once."`
}

func (c *ctMigrateCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		req := cli.MigrateRequest{Target: c.Target, Restart: c.Restart, Timeout: c.Timeout,
			TargetStorage: c.TargetStorage, BWLimit: c.BWLimit}
		cid, err := clusterID(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		upid, err := s.MigrateGuest(ctx, cli.KindCT, cid, c.Node, c.VMID, req)
		if errors.Is(err, context.Canceled) {
			return &cli.ExitError{Code: cli.ExitInterrupted,
				Msg:  "interrupted before vmgate answered: the migration may have started",
				Hint: fmt.Sprintf("look for it: vmgate task list --vmid %d", c.VMID)}
		}
		if err != nil {
			return c.hint(err, "migrate", c.Target)
		}
		if c.NoWatch {
			show("%s", upid)
			return nil
		}
		say("migrating CT %d to %s: %s", c.VMID, c.Target, upid)
		return watch(ctx, s, upid, fmt.Sprintf("interrupted: the migration of CT %d goes on", c.VMID))
	})
}

// ctHint adds to an API error about a container the command that gets past it.
func ctHint(err error, v ctRef, op string, target ...string) error {
	var ae *cli.APIError
	if !errors.As(err, &ae) || ae.Status == 401 {
		return err // the session explains it
	}
	e := cli.Explain(err, "")
	switch ae.Reason {
	case errs.ReasonShutdownTimeout:
		e.Hint = "stop it at once: vmgate ct stop " + v.args() + " --force"
	case errs.ReasonVMRunning:
		if op == "migrate" && len(target) > 0 {
			e.Hint = "move it by a restart: vmgate ct migrate " + v.args() + " --target " + target[0] + " --restart"
		}
	case errs.ReasonVMLocked, errs.ReasonInProgress:
		e.Hint = fmt.Sprintf("see what runs on it: vmgate task list --cluster %s --vmid %d", v.Cluster, v.VMID)
	case "not_found":
		node, _ := ae.Body["node"].(string)
		if kind, _ := ae.Body["kind"].(string); kind == "qemu" && node != "" {
			e.Hint = fmt.Sprintf("%d is a VM: vmgate vm %s %s %s %d", v.VMID, op, v.Cluster, node, v.VMID)
		} else if node != "" && node != v.Node {
			e.Hint = fmt.Sprintf("it is on %s: vmgate ct %s %s %s %d", node, op, v.Cluster, node, v.VMID)
		}
	}
	return e
}
