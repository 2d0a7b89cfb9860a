package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
	"github.com/vmgate/vmgate/internal/errs"
)

// `vmgate ct …`: LXC containers, through the API's /pve/lxc/ routes (the same
// use cases as VMs, with PVE's container rules: docs/decisions/0080), and
// `vmgate guest list`, the guests of both kinds.

type ctRef struct {
	Cluster string `arg:"" placeholder:"ID|NAME" help:"The cluster, by id or name."`
	Node    string `arg:"" help:"Node the container is on."`
	VMID    int64  `arg:"" name:"vmid" help:"Container id."`
}

func (v ctRef) args() string { return fmt.Sprintf("%s %s %d", v.Cluster, v.Node, v.VMID) }

type ctCmd struct {
	List    ctListCmd    `cmd:"" help:"List a cluster's containers, filtered; read in pages to the end."`
	Status  ctStatusCmd  `cmd:"" help:"Show a container's status."`
	Start   ctStartCmd   `cmd:"" help:"Start a container."`
	Stop    ctStopCmd    `cmd:"" help:"Shut a container down gracefully and wait for PVE's outcome, or stop it at once with --force."`
	Reboot  ctRebootCmd  `cmd:"" help:"Reboot a container."`
	Migrate ctMigrateCmd `cmd:"" help:"Move a container to another node (a running one with --restart) and follow the task."`
	// remote.go
	RemoteMigrate ctRemoteMigrateCmd `cmd:"" name:"remote-migrate" help:"Move a container to another cluster (--dry-run: the pre-check) and follow the task."`
}

type ctListCmd struct {
	conn
	output
	clusterFlag
	listFilter
}

func (c *ctListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := c.resolve(ctx, s)
		if err != nil {
			return err
		}
		l, err := containers(ctx, s, id, c.filter())
		if err != nil {
			return err
		}
		asOf(len(l.Items), "containers", l.AsOf)
		return printList(c.output, l, func(list []client.Guest) cli.TableOf { return cli.GuestsTable(list, nil, false) })
	})
}

type ctStatusCmd struct {
	conn
	output
	ctRef
}

func (c *ctStatusCmd) Run() error { return guestStatus(c.conn, c.output, c.ctRef) }

type ctStartCmd struct {
	conn
	ctRef
	Wait int `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *ctStartCmd) Run() error {
	return power(c.conn, c.ctRef, "start", client.PowerOptions{Wait: &c.Wait})
}

type ctRebootCmd struct {
	conn
	ctRef
	Timeout *int `help:"Seconds PVE gives the container to shut down before the start."`
	Wait    int  `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *ctRebootCmd) Run() error {
	return power(c.conn, c.ctRef, "reboot", client.PowerOptions{Wait: &c.Wait, Timeout: c.Timeout})
}

type ctStopCmd struct {
	conn
	ctRef
	stopFlags
}

func (c *ctStopCmd) Run() error { return power(c.conn, c.ctRef, "stop", c.powerOptions()) }

func (v ctRef) ref(ctx context.Context, s *cli.Session) (client.GuestRef, error) {
	cid, err := clusterID(ctx, s, v.Cluster)
	return client.CT(cid, v.Node, v.VMID), err
}

func (v ctRef) hint(err error, op string, target ...string) error {
	return ctHint(err, v, op, target...)
}

type ctMigrateCmd struct {
	conn
	ctRef
	Target        string `required:"" help:"Target node."`
	Restart       bool   `help:"Move a running container by a restart: shut down, moved, started on the target (PVE cannot move a container live). Without it a running container is refused (ct_running)."`
	Timeout       *int   `help:"Seconds the restart gives the container to shut down (PVE's default: 180)."`
	TargetStorage string `help:"Target storage (PVE storage map)."`
	BWLimit       *int   `name:"bwlimit" help:"Bandwidth limit in KiB/s."`
	NoWatch       bool   `help:"Print the task id and return at once."`
}

func (c *ctMigrateCmd) Run() error {
	req := client.MigrateRequest{Target: c.Target, Timeout: c.Timeout, TargetStorage: c.TargetStorage, BWLimit: c.BWLimit}
	if c.Restart {
		req.Restart = &c.Restart
	} else {
		// Without --restart a running container is refused (409 ct_running)
		// with the command that moves it: the API's default would restart it
		// unasked, and a person at a terminal says so.
		no := false
		req.Restart = &no
	}
	return migrate(c.conn, c.ctRef, req, c.NoWatch)
}

// ctHint adds to an API error about a container the command that gets past it.
func ctHint(err error, v ctRef, op string, target ...string) error {
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status == 401 {
		return err // the session explains it
	}
	e := cli.Explain(err, "")
	switch ae.Reason {
	case errs.ReasonShutdownTimeout:
		e.Hint = "stop it at once: vmgate ct stop " + v.args() + " --force"
	case errs.ReasonCTRunning:
		if op == "migrate" && len(target) > 0 {
			e.Hint = "move it by a restart: vmgate ct migrate " + v.args() + " --target " + target[0] + " --restart"
		}
	case errs.ReasonCTStopped:
		e.Hint = "start it first: vmgate ct start " + v.args()
	case errs.ReasonVMLocked, errs.ReasonInProgress:
		e.Hint = fmt.Sprintf("see what runs on it: vmgate task list --cluster %s --vmid %d", v.Cluster, v.VMID)
	case "not_found":
		node := ae.Detail("node")
		if ae.Detail("kind") == "qemu" && node != "" {
			e.Hint = fmt.Sprintf("%d is a VM: vmgate vm %s %s %s %d", v.VMID, op, v.Cluster, node, v.VMID)
		} else if node != "" && node != v.Node {
			e.Hint = fmt.Sprintf("it is on %s: vmgate ct %s %s %s %d", node, op, v.Cluster, node, v.VMID)
		}
	}
	return e
}

// containers lists a cluster's containers: the guest list of type lxc (GET
// /pve/clusters/{id}/guests?type=lxc, issue 18).
func containers(ctx context.Context, s *cli.Session, clusterID int64, f client.GuestFilter) (client.Listing[client.Guest], error) {
	f.Type = client.LXC
	return s.ClusterGuests(ctx, clusterID, f)
}

// ---- guests of both kinds ----

type guestCmd struct {
	List guestListCmd `cmd:"" help:"List VMs and containers, with a TYPE column: of one cluster (--cluster) or of every cluster you may see."`
}

type guestListCmd struct {
	conn
	output
	listFilter
	Cluster string `env:"VMGATE_CLUSTER" placeholder:"ID|NAME" help:"Only this cluster's guests (default: every cluster you may see)."`
	Type    string `enum:",qemu,lxc" default:"" help:"Only this kind: qemu (VMs) or lxc (containers)."`
	Pool    string `help:"Only the guests in this PVE pool."`
}

func (c *guestListCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		f := c.filter()
		f.Type, f.Pool = client.GuestKind(c.Type), c.Pool
		var (
			l     client.Listing[client.Guest]
			err   error
			fleet = c.Cluster == ""
		)
		if fleet {
			var fl client.FleetGuests
			fl, err = s.Guests(ctx, f)
			l = fl.Listing
			for _, u := range fl.Unavailable {
				say("cluster %s (%d) could not be read, its guests are missing: %s", u.ClusterName, u.ClusterID, u.Message)
			}
		} else {
			id, rerr := clusterID(ctx, s, c.Cluster)
			if rerr != nil {
				return rerr
			}
			l, err = s.ClusterGuests(ctx, id, f)
		}
		if err != nil {
			return err
		}
		asOf(len(l.Items), "guests", l.AsOf)
		var names cli.ClusterNames
		if fleet {
			names = clusterNames(ctx, s)
		}
		return printList(c.output, l, func(list []client.Guest) cli.TableOf { return cli.GuestsTable(list, names, fleet) })
	})
}
