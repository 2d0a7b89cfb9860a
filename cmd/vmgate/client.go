package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/cli"
)

// clientCmds are the commands that talk to a running vmgate server.
type clientCmds struct {
	Login   loginCmd   `cmd:"" group:"client" help:"Log in to a vmgate server and keep the token."`
	Logout  logoutCmd  `cmd:"" group:"client" help:"End the session."`
	Refresh refreshCmd `cmd:"" group:"client" help:"Rotate the kept token."`
	Me      meCmd      `cmd:"" group:"client" help:"Show who you are and your grants."`
	Get     getCmd     `cmd:"" group:"client" help:"GET an API path and print its data as JSON (e.g. /pve/clusters)."`
	VM      vmCmd      `cmd:"" name:"vm" group:"client" help:"Start, stop, reboot, migrate or show a VM."`
	Task    taskCmd    `cmd:"" group:"client" help:"Show, watch or read the log of a task."`
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}

// savedClient builds a client from the kept session; $VMGATE_CA_FILE overrides
// the CA file given at login.
func savedClient() (*cli.Client, error) {
	s, err := cli.LoadSaved()
	if err != nil {
		return nil, err
	}
	cl := cli.NewClient(s.Server, s.Token)
	ca := s.CAFile
	if env := os.Getenv("VMGATE_CA_FILE"); env != "" {
		ca = env
	}
	return cl, cl.TrustCAFile(ca)
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type loginCmd struct {
	Server        string `default:"http://127.0.0.1:8080" env:"VMGATE_SERVER" help:"vmgate's base URL (https://... or, on this machine, http://...)."`
	CAFile        string `env:"VMGATE_CA_FILE" type:"existingfile" help:"PEM file of the CA (or the self-signed certificate) to check an https:// server's certificate against, instead of the system's."`
	Email         string `required:"" env:"VMGATE_EMAIL" help:"Your e-mail."`
	PasswordStdin bool   `help:"Read the password from one line of standard input."`
}

// readPasswordLine reads one line and strips its line ending (DESIGN §7).
func readPasswordLine() (string, error) {
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return "", errors.New("no password on standard input")
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func (c *loginCmd) Run() error {
	pw := os.Getenv("VMGATE_PASSWORD")
	if c.PasswordStdin || pw == "" {
		if !c.PasswordStdin {
			fmt.Fprint(os.Stderr, "password (one line on stdin): ")
		}
		var err error
		if pw, err = readPasswordLine(); err != nil {
			return err
		}
	}
	ctx, cancel := signalContext()
	defer cancel()
	cl := cli.NewClient(c.Server, "")
	ca := c.CAFile
	if ca != "" {
		var err error
		if ca, err = filepath.Abs(ca); err != nil {
			return err
		}
	}
	if err := cl.TrustCAFile(ca); err != nil {
		return err
	}
	t, err := cl.Login(ctx, c.Email, pw)
	if err != nil {
		return err
	}
	if err := cli.Save(cli.Saved{Server: cl.BaseURL, Token: t.Token, CAFile: ca}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "logged in as %s; token valid until %s\n", c.Email, t.ExpiresAt.Local().Format("15:04:05"))
	return nil
}

type logoutCmd struct{}

func (logoutCmd) Run() error {
	cl, err := savedClient()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	if err := cl.Logout(ctx); err != nil {
		var ae *cli.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			return err
		}
	}
	return cli.Forget()
}

type refreshCmd struct{}

func (refreshCmd) Run() error {
	cl, err := savedClient()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	t, err := cl.Refresh(ctx)
	if err != nil {
		return err
	}
	s, _ := cli.LoadSaved()
	s.Token = t.Token
	return cli.Save(s)
}

type meCmd struct{}

func (meCmd) Run() error { return getData("/user/me") }

type getCmd struct {
	Path string `arg:"" help:"Path under /api/v1, e.g. /pve/clusters or /pve/clusters/1/vms."`
}

func (c *getCmd) Run() error { return getData(c.Path) }

func getData(path string) error {
	cl, err := savedClient()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	p, q, _ := strings.Cut(path, "?")
	query, err := url.ParseQuery(q)
	if err != nil {
		return err
	}
	resp, err := cl.Do(ctx, http.MethodGet, "/api/v1/"+strings.TrimPrefix(p, "/"), query, nil, nil)
	if err != nil {
		return err
	}
	var v any
	if len(resp.Data) > 0 {
		json.Unmarshal(resp.Data, &v)
	}
	// The data goes to stdout as it is; what the envelope says about it, to stderr.
	if resp.AsOf != nil {
		fmt.Fprintf(os.Stderr, "as of %s\n", resp.AsOf.Local().Format("15:04:05.000"))
	}
	if resp.NextCursor != "" {
		fmt.Fprintf(os.Stderr, "more: add cursor=%s to the query for the next page\n", url.QueryEscape(resp.NextCursor))
	}
	return printJSON(v)
}

// vmRef names a VM.
type vmRef struct {
	Cluster int64  `arg:"" help:"Cluster id."`
	Node    string `arg:"" help:"Node the VM is on."`
	VMID    int64  `arg:"" name:"vmid" help:"VM id."`
}

type vmCmd struct {
	List    vmListCmd    `cmd:"" help:"List a cluster's VMs, filtered (read in pages, to the end)."`
	Status  vmStatusCmd  `cmd:"" help:"Show a VM's status."`
	Start   vmStartCmd   `cmd:"" help:"Start a VM."`
	Stop    vmStopCmd    `cmd:"" help:"Shut a VM down gracefully, or power it off with --force."`
	Reboot  vmRebootCmd  `cmd:"" help:"Reboot a VM."`
	Migrate vmMigrateCmd `cmd:"" help:"Migrate a VM to another node and follow the task."`
}

type vmListCmd struct {
	Cluster  int64  `arg:"" help:"Cluster id."`
	Node     string `help:"Only the VMs on this node."`
	Status   string `help:"Only the VMs in this state: running, stopped or unknown."`
	Tag      string `help:"Only the VMs with this tag."`
	Q        string `name:"q" help:"Only the VMs whose name holds this text (ignoring case) or whose vmid it is."`
	PageSize int    `default:"1000" help:"VMs per request."`
	JSON     bool   `name:"json" help:"Print JSON instead of a table."`
}

func (c *vmListCmd) Run() error {
	cl, err := savedClient()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	vms, asOf, err := cl.VMs(ctx, c.Cluster, cli.VMFilter{Node: c.Node, Status: c.Status, Tag: c.Tag, Q: c.Q, PageSize: c.PageSize})
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(vms)
	}
	fmt.Printf("%-10s %-30s %-12s %-8s %s\n", "VMID", "NAME", "NODE", "STATUS", "TAGS")
	for _, v := range vms {
		fmt.Printf("%-10d %-30s %-12s %-8s %s\n", v.VMID, v.Name, v.Node, v.Status, strings.Join(v.Tags, ","))
	}
	fmt.Fprintf(os.Stderr, "%d VMs, as of %s\n", len(vms), asOf.Local().Format("15:04:05.000"))
	return nil
}

type vmStatusCmd struct{ vmRef }

func (c *vmStatusCmd) Run() error {
	return getData(strings.TrimPrefix(cli.VMPath(c.Cluster, c.Node, c.VMID), "/api/v1"))
}

type vmStartCmd struct {
	vmRef
	Wait int `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *vmStartCmd) Run() error { return power(c.vmRef, "start", false, c.Wait) }

type vmRebootCmd vmStartCmd

func (c *vmRebootCmd) Run() error { return power(c.vmRef, "reboot", false, c.Wait) }

type vmStopCmd struct {
	vmRef
	Force   bool `help:"Power off at once, even while a graceful shutdown hangs."`
	Timeout *int `help:"Seconds PVE gives the guest to shut down (PVE's default: 60)."`
	Wait    int  `default:"60" help:"Seconds to wait for the PVE task (0: do not wait)."`
}

func (c *vmStopCmd) Run() error {
	q := url.Values{}
	if c.Timeout != nil {
		q.Set("timeout", strconv.Itoa(*c.Timeout))
	}
	return powerQuery(c.vmRef, "stop", c.Force, c.Wait, q)
}

func power(v vmRef, op string, force bool, wait int) error {
	return powerQuery(v, op, force, wait, nil)
}

func powerQuery(v vmRef, op string, force bool, wait int, extra url.Values) error {
	cl, err := savedClient()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	upid, running, err := cl.Power(ctx, v.Cluster, v.Node, v.VMID, op, force, wait, extra)
	if err != nil {
		return err
	}
	if running {
		fmt.Printf("%s VM %d: still running; follow it with `vmgate task watch %s`\n", op, v.VMID, upid)
		return nil
	}
	fmt.Printf("%s VM %d: done (%s)\n", op, v.VMID, upid)
	return nil
}

type vmMigrateCmd struct {
	vmRef
	Target         string `required:"" help:"Target node."`
	Offline        bool   `help:"Refuse a live migration: the VM must be stopped."`
	WithLocalDisks bool   `help:"Also copy local disks."`
	TargetStorage  string `help:"Target storage (PVE storage map)."`
	BWLimit        *int   `name:"bwlimit" help:"Bandwidth limit in KiB/s."`
	NoWatch        bool   `help:"Print the task id and return at once."`
}

func (c *vmMigrateCmd) Run() error {
	cl, err := savedClient()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	req := cli.MigrateRequest{Target: c.Target, WithLocalDisks: c.WithLocalDisks, TargetStorage: c.TargetStorage, BWLimit: c.BWLimit}
	if c.Offline {
		f := false
		req.Online = &f
	}
	upid, err := cl.Migrate(ctx, c.Cluster, c.Node, c.VMID, req)
	if err != nil {
		return err
	}
	fmt.Println(upid)
	if c.NoWatch {
		return nil
	}
	return watch(ctx, cl, upid)
}

func watch(ctx context.Context, cl *cli.Client, upid string) error {
	t, err := cl.Watch(ctx, upid, os.Stderr)
	if err != nil {
		return err
	}
	exit := ""
	if t.ExitStatus != nil {
		exit = *t.ExitStatus
	}
	fmt.Printf("%s: %s (%s)\n", t.Type, t.Result, exit)
	if t.Result == "failed" {
		return fmt.Errorf("task failed: %s", t.Error)
	}
	return nil
}

type taskCmd struct {
	Show  taskShowCmd  `cmd:"" help:"Show a task."`
	Watch taskWatchCmd `cmd:"" help:"Follow a task to its end."`
	Log   taskLogCmd   `cmd:"" help:"Print a task's log."`
}

type taskShowCmd struct {
	UPID    string `arg:"" name:"upid"`
	Cluster int64  `help:"Cluster id, for a task vmgate did not start."`
}

func (c *taskShowCmd) Run() error {
	cl, err := savedClient()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	t, err := cl.Task(ctx, c.UPID, c.Cluster, 0)
	if err != nil {
		return err
	}
	return printJSON(t)
}

type taskWatchCmd struct {
	UPID string `arg:"" name:"upid"`
}

func (c *taskWatchCmd) Run() error {
	cl, err := savedClient()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	return watch(ctx, cl, c.UPID)
}

type taskLogCmd struct {
	UPID string `arg:"" name:"upid"`
}

func (c *taskLogCmd) Run() error {
	cl, err := savedClient()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	var out struct {
		Lines []struct {
			N int    `json:"n"`
			T string `json:"t"`
		} `json:"lines"`
	}
	if _, err := cl.Do(ctx, http.MethodGet, cli.TaskPath(c.UPID)+"/log", url.Values{"limit": {strconv.Itoa(0)}}, nil, &out); err != nil {
		return err
	}
	for _, l := range out.Lines {
		fmt.Println(l.T)
	}
	return nil
}
