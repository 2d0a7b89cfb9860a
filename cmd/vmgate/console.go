package main

import (
	"context"
	"errors"
	"os"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
)

// `vmgate console CLUSTER NODE VMID` (issue 21 item 5): a container's console, or
// a VM's serial console, on this terminal, like `pct enter` and `qm terminal`.

type consoleCmd struct {
	conn
	Cluster string `arg:"" placeholder:"ID|NAME" help:"The cluster, by id or name."`
	Node    string `arg:"" help:"Node the guest is on."`
	VMID    int64  `arg:"" name:"vmid" help:"The container's id, or the VM's (its serial port serial0)."`
}

func (c *consoleCmd) Run() error {
	return withSession(c.conn, func(ctx context.Context, s *cli.Session) error {
		cid, err := clusterID(ctx, s, c.Cluster)
		if err != nil {
			return err
		}
		// A vmid names one guest of a cluster, of either kind: a container
		// first, else a VM.
		g := client.CT(cid, c.Node, c.VMID)
		if _, err := s.GuestStatus(ctx, g); err != nil {
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != 404 {
				return err
			}
			g = client.VM(cid, c.Node, c.VMID)
		}
		t, err := s.OpenConsole(ctx, g, client.ConsoleTerm)
		if err != nil {
			return err
		}
		conn, err := s.DialConsole(ctx, t)
		if err != nil {
			return err
		}
		defer conn.CloseNow()
		return cli.TerminalConsole(ctx, conn, os.Stdin, os.Stdout, os.Stderr, g.String())
	})
}
