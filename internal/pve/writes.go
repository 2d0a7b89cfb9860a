package pve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// StartOptions are the optional parameters of status/start.
type StartOptions struct {
	Timeout *int // QEMU only: seconds to wait for the start; PVE's default is max(30, memory in GiB)
}

// ShutdownOptions are the optional parameters of status/shutdown.
type ShutdownOptions struct {
	Timeout   *int // seconds to wait for the guest; PVE's default is 60 (or the guest's startup down=)
	ForceStop bool // stop the guest if it has not shut down when the timeout ends
}

// StopOptions are the optional parameters of status/stop.
type StopOptions struct {
	Timeout          *int // QEMU only: seconds to wait after QMP quit before SIGTERM
	OverruleShutdown bool // abort running shutdown tasks first (PVE ≥ 8.1; not for HA guests)
}

// RebootOptions are the optional parameters of status/reboot.
type RebootOptions struct {
	Timeout *int // seconds to wait for the shutdown half
}

// MigrateOptions are the parameters of POST migrate. The two kinds take
// different ones (qemu-server's and pve-container's schemas): a container
// moves stopped or by a restart, never live with its memory.
type MigrateOptions struct {
	Target         string // required
	Online         bool   // QEMU: live migration of a running VM; LXC: PVE refuses a running CT without Restart
	WithLocalDisks bool   // QEMU only
	TargetStorage  string // storage map "src:dst,..." or one storage id
	BWLimit        *int   // KiB/s
	Restart        bool   // LXC only: shut a running CT down, move it, start it on the target
	Timeout        *int   // LXC only: the restart's shutdown timeout, seconds (PVE's default 180)
}

// errOnlyFor refuses an option a kind does not have, before anything is sent.
func errOnlyFor(g Guest, option string, kind GuestKind) error {
	return &NotSentError{Err: fmt.Errorf("pve: %w: %s is for %s guests only, not %s", ErrInvalidArgument, option, kind, g)}
}

// Start starts guest g and returns the UPID of PVE's task. Whether the guest
// really started is the task's result (PVE checks almost nothing before it
// answers). Like every write it is never repeated.
func (c *Client) Start(ctx context.Context, g Guest, o StartOptions) (UPID, error) {
	f := url.Values{}
	if o.Timeout != nil && g.Kind != Qemu {
		return UPID{}, errOnlyFor(g, "a start timeout", Qemu)
	}
	if err := putSeconds(f, "timeout", o.Timeout); err != nil {
		return UPID{}, err
	}
	return c.startTask(ctx, g, ActStart, "status/start", f)
}

// Shutdown asks the guest to shut down (ACPI or the guest agent for a VM, the
// container's init for a CT).
func (c *Client) Shutdown(ctx context.Context, g Guest, o ShutdownOptions) (UPID, error) {
	f := url.Values{}
	if err := putSeconds(f, "timeout", o.Timeout); err != nil {
		return UPID{}, err
	}
	putBool(f, "forceStop", o.ForceStop)
	return c.startTask(ctx, g, ActShutdown, "status/shutdown", f)
}

// Stop powers the guest off at once.
func (c *Client) Stop(ctx context.Context, g Guest, o StopOptions) (UPID, error) {
	f := url.Values{}
	if o.Timeout != nil && g.Kind != Qemu {
		return UPID{}, errOnlyFor(g, "a stop timeout", Qemu)
	}
	if err := putSeconds(f, "timeout", o.Timeout); err != nil {
		return UPID{}, err
	}
	putBool(f, "overrule-shutdown", o.OverruleShutdown)
	return c.startTask(ctx, g, ActStop, "status/stop", f)
}

// Reboot shuts the guest down and starts it again (for a VM the start is a
// separate qmstart task by root@pam).
func (c *Client) Reboot(ctx context.Context, g Guest, o RebootOptions) (UPID, error) {
	f := url.Values{}
	if err := putSeconds(f, "timeout", o.Timeout); err != nil {
		return UPID{}, err
	}
	return c.startTask(ctx, g, ActReboot, "status/reboot", f)
}

// Suspend pauses a running guest: a VM by QMP stop (task qmpause; it keeps its
// memory and process, status/current shows qmpstatus "paused"), a CT by freezing
// it (vzsuspend). With toDisk (QEMU only) it hibernates the VM instead (task
// qmsuspend): the state is saved to a vmstate volume on PVE's default state
// storage, QEMU quits and the VM stays stopped with lock "suspended" until
// Resume or Start. PVE refuses at once a guest that is not running ("VM 100 not
// running"), and hibernation of an HA-managed VM or one with PCI passthrough; it
// needs VM.Config.Disk on top of VM.PowerMgmt.
func (c *Client) Suspend(ctx context.Context, g Guest, toDisk bool) (UPID, error) {
	f := url.Values{}
	action := ActSuspend
	if toDisk {
		if g.Kind != Qemu {
			return UPID{}, errOnlyFor(g, "hibernation", Qemu)
		}
		putBool(f, "todisk", true)
		action = ActHibernate
	}
	return c.startTask(ctx, g, action, "status/suspend", f)
}

// Resume continues a paused guest (a VM also in prelaunch; QMP cont), or starts
// a hibernated VM from its saved state; for a VM a qmresume task, for a CT
// vzresume. PVE refuses at once a guest that neither runs nor is hibernated
// ("VM 100 not running").
func (c *Client) Resume(ctx context.Context, g Guest) (UPID, error) {
	return c.startTask(ctx, g, ActResume, "status/resume", url.Values{})
}

// Migrate moves guest g from its node to o.Target.
func (c *Client) Migrate(ctx context.Context, g Guest, o MigrateOptions) (UPID, error) {
	if err := checkNode("target", o.Target); err != nil {
		return UPID{}, &NotSentError{Err: fmt.Errorf("pve: %w", err)}
	}
	f := url.Values{"target": {o.Target}}
	putBool(f, "online", o.Online)
	storageParam := "targetstorage"
	switch g.Kind {
	case Qemu:
		if o.Restart || o.Timeout != nil {
			return UPID{}, errOnlyFor(g, "a restart migration", LXC)
		}
		putBool(f, "with-local-disks", o.WithLocalDisks)
	case LXC:
		if o.WithLocalDisks {
			return UPID{}, errOnlyFor(g, "with-local-disks", Qemu)
		}
		putBool(f, "restart", o.Restart)
		if err := putSeconds(f, "timeout", o.Timeout); err != nil {
			return UPID{}, err
		}
		storageParam = "target-storage" // pve-container spells it with a hyphen
	}
	if o.TargetStorage != "" {
		if len(o.TargetStorage) > 1024 || !storageMapSyntax(o.TargetStorage) {
			return UPID{}, &NotSentError{Err: fmt.Errorf("pve: %w: target storage %q", ErrInvalidArgument, truncate(o.TargetStorage, 40))}
		}
		f.Set(storageParam, o.TargetStorage)
	}
	if err := putSeconds(f, "bwlimit", o.BWLimit); err != nil {
		return UPID{}, err
	}
	return c.startTask(ctx, g, ActMigrate, "migrate", f)
}

// storageMapSyntax admits PVE's storage-pair-list ("src:dst,src2:dst2", one
// storage id, or "1"): storage ids, colons and commas only.
func storageMapSyntax(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':' || c == ',') {
			return false
		}
	}
	return s != ""
}

// putBool sends a boolean the only way PVE's schema accepts in a form: 0 or 1.
// Only true values are sent; false is every parameter's default.
func putBool(f url.Values, name string, v bool) {
	if v {
		f.Set(name, "1")
	}
}

func putSeconds(f url.Values, name string, v *int) error {
	if v == nil {
		return nil
	}
	if *v < 0 {
		return fmt.Errorf("pve: %w: %s %d is negative", ErrInvalidArgument, name, *v)
	}
	f.Set(name, strconv.Itoa(*v))
	return nil
}

// lookupWindow is how far before the write, in PVE's time, the task list is
// searched after an ambiguous write: room for the offset's error and for a
// cluster's nodes disagreeing a little.
const lookupWindow = 10 * time.Second

// startTask POSTs a guest action and returns the UPID PVE answers with, after
// checking it is a task of that action and kind (taskTypes), for that guest, on
// that node.
func (c *Client) startTask(ctx context.Context, g Guest, action Action, sub string, form url.Values) (UPID, error) {
	node, vmid := g.Node, g.VMID
	types := TaskTypesFor(g.Kind, action)
	p, err := guestPath(g, sub)
	if err != nil {
		return UPID{}, &NotSentError{Err: fmt.Errorf("pve: %w", err)}
	}
	started := c.now()
	var text flexString
	res, err := c.do(ctx, call{method: http.MethodPost, path: p, form: form, limit: limitDefault, out: &text})
	var amb *ambiguity
	if errors.As(err, &amb) {
		return UPID{}, c.findTask(ctx, amb, p, g, types, started)
	}
	if err != nil {
		return UPID{}, err
	}
	if err := res.dataErr; err != nil {
		return UPID{}, fmt.Errorf("pve: POST %s at %s: %w: no UPID: %v", p, res.ep.base, ErrBadResponse, err)
	}
	u, err := c.checkTaskUPID(string(text), node, vmid, types)
	if err != nil {
		return UPID{}, fmt.Errorf("pve: POST %s at %s: %w: %v", p, res.ep.base, ErrBadResponse, err)
	}
	c.recent.add(u)
	return u, nil
}

// checkTaskUPID validates a UPID PVE handed back for a guest write.
func (c *Client) checkTaskUPID(text, node string, vmid int, types []string) (UPID, error) {
	u, err := ParseUPID(text)
	if err != nil {
		return UPID{}, err
	}
	if u.Node != node {
		return UPID{}, fmt.Errorf("task %s runs on node %s, not %s", u, u.Node, node)
	}
	if u.ID != vmidText(vmid) {
		return UPID{}, fmt.Errorf("task %s is about %q, not guest %d", u, u.ID, vmid)
	}
	if !contains(types, u.Type) {
		return UPID{}, fmt.Errorf("task %s is a %s task, want one of %v", u, u.Type, types)
	}
	if u.User != c.tokenID {
		// Not proof of anything wrong (PVE could spell the id differently), so
		// only noted.
		c.log.Warn("pve: task started under another user than the token", "upid", u.String(), "token", c.tokenID)
	}
	return u, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// findTask lists the tasks an ambiguous write may have started: the node's
// task list (active and archived) filtered by VM, our token, the write's task
// types and start time (in PVE's time), less the tasks this client was handed
// as the answer to a write. It never decides which of them is the write's,
// not even when there is one: another request for the same VM — on this
// replica or another, its answer not yet arrived — may have started it, and
// only the caller, who knows every request it made, can tell (vmops matches
// its task rows with the list). So the answer is always an *AmbiguousError,
// with the candidates. The lookup gets its own deadline, even when the write's
// context has ended: knowing whether a task started matters most then.
func (c *Client) findTask(ctx context.Context, amb *ambiguity, p apiPath, g Guest, types []string, started time.Time) error {
	node, vmid := g.Node, g.VMID
	aerr := &AmbiguousError{Method: http.MethodPost, Path: p.escaped, Endpoint: amb.ep.base, Node: node, VMID: vmid, Err: amb.cause}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(c.timeout, 15*time.Second))
	defer cancel()
	since := c.PVETime(started).Add(-lookupWindow)
	list, err := c.NodeTasks(lctx, node, TaskListOptions{
		Source: "all", VMID: vmid, UserFilter: tokenUser(c.tokenID), Since: since, Limit: 100,
	})
	if err != nil {
		aerr.LookupErr = err
		c.log.Warn("pve: write outcome unknown and task list unreadable", "path", p.escaped, "err", err)
		return aerr
	}
	for _, t := range list {
		u := t.UPID
		if u.Node != node || u.ID != vmidText(vmid) || u.User != c.tokenID || !contains(types, u.Type) ||
			u.StartTime.Before(since.Truncate(time.Second)) || c.recent.has(u) {
			continue
		}
		aerr.Candidates = append(aerr.Candidates, u)
	}
	c.log.Warn("pve: write outcome unknown", "path", p.escaped, "candidates", len(aerr.Candidates), "cause", amb.cause)
	return aerr
}
