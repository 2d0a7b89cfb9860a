package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/cli"
	"github.com/vmgate/vmgate/internal/errs"
)

// `vmgate vm remote-migrate` and `vmgate ct remote-migrate`: move a guest to
// another cluster (issue 22), or with --dry-run print what would happen.

// remoteFlags are the flags both kinds share.
type remoteFlags struct {
	output
	TargetCluster string   `name:"target-cluster" required:"" help:"The target cluster: its name or id."`
	TargetNode    string   `name:"target-node" help:"A node of the target cluster (default: the online node with the most free memory)."`
	TargetVMID    int      `name:"target-vmid" help:"The vmid on the target (default: the same)."`
	Storage       []string `help:"Where the disks go: NAME for all, or SRC=DST (repeat for each storage)."`
	Bridge        []string `help:"Where the network devices go: NAME for all, or SRC=DST (repeat for each bridge)."`
	Delete        bool     `help:"Delete the guest on the source after the move (PVE keeps it stopped and locked otherwise)."`
	BWLimit       *int     `name:"bwlimit" help:"Bandwidth limit in KiB/s."`
	DryRun        bool     `name:"dry-run" help:"Print the pre-check (targets, mappings, the target token's privileges, blockers) and move nothing."`
	NoWatch       bool     `help:"Print the task id and return at once."`
}

// remoteMap reads --storage/--bridge values.
func remoteMap(flag string, vals []string) (client.RemoteMap, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	m := client.RemoteMap{}
	for _, v := range vals {
		src, dst, pair := strings.Cut(v, "=")
		switch {
		case !pair && len(vals) == 1 && v != "":
			m[""] = v
		case pair && src != "" && dst != "":
			m[src] = dst
		default:
			return nil, &cli.ExitError{Code: cli.ExitUsage, Msg: fmt.Sprintf("--%s %q: give NAME once, or SRC=DST for each", flag, v)}
		}
	}
	return m, nil
}

func (f remoteFlags) request() (client.RemoteMigrateRequest, error) {
	req := client.RemoteMigrateRequest{TargetCluster: f.TargetCluster, TargetNode: f.TargetNode, TargetVMID: f.TargetVMID,
		Delete: f.Delete, BWLimit: f.BWLimit}
	var err error
	if req.TargetStorage, err = remoteMap("storage", f.Storage); err != nil {
		return req, err
	}
	req.TargetBridge, err = remoteMap("bridge", f.Bridge)
	return req, err
}

type vmRemoteMigrateCmd struct {
	conn
	vmRef
	remoteFlags
	Offline bool `help:"Refuse a live move: the VM must be stopped."`
}

func (c *vmRemoteMigrateCmd) Run() error {
	req, err := c.request()
	if err != nil {
		return err
	}
	if c.Offline {
		no := false
		req.Online = &no
	}
	return remoteMigrate(c.conn, c.vmRef, c.remoteFlags, req)
}

type ctRemoteMigrateCmd struct {
	conn
	ctRef
	remoteFlags
	Restart bool `help:"Move a running container by a restart (shut down, moved, started on the target). Without it a running container is refused."`
}

func (c *ctRemoteMigrateCmd) Run() error {
	req, err := c.request()
	if err != nil {
		return err
	}
	restart := c.Restart
	req.Restart = &restart
	return remoteMigrate(c.conn, c.ctRef, c.remoteFlags, req)
}

// remoteMigrate runs the pre-check (--dry-run) or the move, followed to its end.
func remoteMigrate(c conn, g guestArg, f remoteFlags, req client.RemoteMigrateRequest) error {
	return withSession(c, func(ctx context.Context, s *cli.Session) error {
		ref, err := g.ref(ctx, s)
		if err != nil {
			return err
		}
		noun := ref.Kind.Noun()
		if f.DryRun {
			pc, err := s.RemoteMigrateCheck(ctx, ref, req)
			if err != nil {
				return g.hint(err, "remote-migrate")
			}
			return printRemotePrecheck(f.output, noun, ref.VMID, pc)
		}
		upid, err := s.RemoteMigrate(ctx, ref, req)
		if errors.Is(err, context.Canceled) {
			return &cli.ExitError{Code: cli.ExitInterrupted,
				Msg:  "interrupted before vmgate answered: the move may have started",
				Hint: fmt.Sprintf("look for it: vmgate task list --vmid %d", ref.VMID)}
		}
		if err != nil {
			return remoteHint(g.hint(err, "remote-migrate"), err)
		}
		if f.NoWatch {
			show("%s", upid)
			return nil
		}
		say("moving %s %d to cluster %s: %s", noun, ref.VMID, req.TargetCluster, upid)
		return watch(ctx, s, upid, fmt.Sprintf("interrupted: the move of %s %d goes on", noun, ref.VMID))
	})
}

// remoteHint says how to get past a remote migration's refusal.
func remoteHint(explained, err error) error {
	var ae *client.APIError
	e, ok := explained.(*cli.ExitError)
	if !errors.As(err, &ae) || !ok {
		return explained
	}
	switch ae.Reason {
	case errs.ReasonVMIDTaken:
		if n, ok := ae.Details["nextVmid"].(float64); ok {
			e.Hint = "give it another vmid there: --target-vmid " + strconv.Itoa(int(n))
		}
	case errs.ReasonTargetTokenLacksPermissions:
		e.Hint = "grant the target cluster's token what it lacks (pveum acl modify), or see all: --dry-run"
	case errs.ReasonHAManaged:
		e.Hint = "take it out of HA on its cluster first (ha-manager remove), then move it"
	case "invalid_request":
		if ae.HasDetail("unmappedDisks") || ae.HasDetail("unmappedNics") {
			e.Hint = "map them: --storage SRC=DST --bridge SRC=DST (--dry-run lists the target's storages and bridges)"
		}
	}
	return e
}

func orDash(p *string) string {
	if p == nil || *p == "" {
		return "-"
	}
	return *p
}

// printRemotePrecheck prints the pre-check: JSON with -o json, else in words.
func printRemotePrecheck(o output, noun string, vmid int64, pc client.RemotePrecheck) error {
	f, err := cli.ChooseFormat(o.Output, os.Stdout)
	if err != nil {
		return err
	}
	if f == cli.JSON {
		return cli.WriteJSON(os.Stdout, pc)
	}
	state := "stopped"
	if pc.Running {
		state = "running"
	}
	showWrapped("%s %d (%s) to cluster %s, node %s, as %d", noun, vmid, state, pc.TargetCluster.Name, pc.TargetNode, pc.TargetVMID)
	var nodes []string
	for _, n := range pc.Candidates {
		nodes = append(nodes, fmt.Sprintf("%s (%s, %s free)", n.Node, n.Status, humanBytes(n.FreeMem)))
	}
	showWrapped("nodes: %s", strings.Join(nodes, ", "))
	for _, d := range pc.Disks {
		showWrapped("disk %s: %s (%s) → %s", d.Key, d.Volid, humanBytes(d.Size), orDash(d.Target))
	}
	var stores []string
	for _, st := range pc.Storages {
		stores = append(stores, fmt.Sprintf("%s (%s, %s free)", st.Storage, st.Type, humanBytes(st.Avail)))
	}
	showWrapped("target storages: %s", strings.Join(stores, ", "))
	for _, n := range pc.NICs {
		showWrapped("network %s: bridge %s → %s", n.Key, n.Bridge, orDash(n.Target))
	}
	showWrapped("target bridges: %s", strings.Join(pc.Bridges, ", "))
	if pc.VMIDFree {
		showWrapped("vmid %d: free on the target", pc.TargetVMID)
	} else {
		showWrapped("vmid %d: taken on the target (next free: %d)", pc.TargetVMID, pc.NextVMID)
	}
	for _, p := range pc.TokenPermissions {
		mark := "ok"
		if !p.Granted {
			mark = "MISSING"
		}
		showWrapped("target token: %s on %s: %s", p.Privilege, p.Path, mark)
	}
	if len(pc.Blockers) == 0 {
		showWrapped("ready: nothing blocks the move")
		return nil
	}
	for _, b := range pc.Blockers {
		showWrapped("blocked: %s", b)
	}
	return &cli.ExitError{Code: cli.ExitNotFound, Msg: fmt.Sprintf("%d blocker(s): the move would be refused", len(pc.Blockers))}
}

// humanBytes is a size in GiB (or MiB below one GiB).
func humanBytes(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// showWrapped prints a line cut at spaces to fit 100 columns, the rest
// indented.
func showWrapped(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	const width = 100
	for len([]rune(line)) > width {
		r := []rune(line)
		cut := strings.LastIndex(string(r[:width]), " ")
		if cut <= 4 {
			break
		}
		show("%s", string(r[:width])[:cut])
		line = "    " + strings.TrimLeft(string(r[:width])[cut:]+string(r[width:]), " ")
	}
	show("%s", line)
}
