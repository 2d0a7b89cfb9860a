package main

import (
	"context"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
)

// Node maintenance (issue 20 (docs/history.md)): `vmgate node maintenance
// enter|leave`, each an operation started, printed and followed as an
// evacuation is (ops.go's launch).

type nodeMaintenanceCmd struct {
	Enter nodeMaintenanceEnterCmd `cmd:"" help:"Mark a node in maintenance and empty it: no guest is started there until it leaves."`
	Leave nodeMaintenanceLeaveCmd `cmd:"" help:"Take a node out of maintenance: move back the guests entering moved, start those it shut down."`
}

type nodeMaintenanceEnterCmd struct {
	conn
	output
	opStart
	Cluster        string `arg:"" placeholder:"CLUSTER" help:"The cluster, by id or name."`
	Node           string `arg:"" help:"The node."`
	WithLocalDisks bool   `help:"Copy local disks too (without it a guest with one stays)."`
	StopUnmovable  bool   `help:"Shut down the running guests that cannot move (leave starts them again)."`
	NoEvacuate     bool   `help:"Only mark the node; move nothing."`
}

func (c *nodeMaintenanceEnterCmd) Run() error {
	if c.StopOnError {
		return cli.UsageErrorf("--stop-on-error does not apply to maintenance")
	}
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := clusterID(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		evacuate := !c.NoEvacuate
		req := client.MaintenanceRequest{Evacuate: &evacuate, MaxParallel: c.MaxParallel, WithLocalDisks: c.WithLocalDisks,
			StopUnmovable: c.StopUnmovable, DryRun: c.DryRun}
		return launch(ctx, s, c.output, c.opStart, true, func(ctx context.Context) (client.Launched, error) {
			return s.EnterMaintenance(ctx, id, c.Node, req)
		})
	})
}

type nodeMaintenanceLeaveCmd struct {
	conn
	output
	opStart
	Cluster   string `arg:"" placeholder:"CLUSTER" help:"The cluster, by id or name."`
	Node      string `arg:"" help:"The node."`
	NoRestore bool   `help:"Only clear the mark; move and start nothing."`
}

func (c *nodeMaintenanceLeaveCmd) Run() error {
	if c.StopOnError {
		return cli.UsageErrorf("--stop-on-error does not apply to maintenance")
	}
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		id, err := clusterID(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		restore := !c.NoRestore
		req := client.LeaveMaintenanceRequest{Restore: &restore, MaxParallel: c.MaxParallel, DryRun: c.DryRun}
		return launch(ctx, s, c.output, c.opStart, false, func(ctx context.Context) (client.Launched, error) {
			return s.LeaveMaintenance(ctx, id, c.Node, req)
		})
	})
}
