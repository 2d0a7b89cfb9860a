package webui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

// buttons are the VM action buttons a page offers, by their names.
var buttons = regexp.MustCompile(`<button type="submit"[^>]*>(Start|Stop|Force stop|Reboot|Migrate)</button>`)

func offered(body string) []string {
	var out []string
	for _, m := range buttons.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestVMPageOffersWhatRoleAndStateAllow: an operator sees Start on a stopped VM and
// Stop, Reboot, Force stop and Migrate on a running one; a viewer sees none, and a
// POST from the viewer's own session (with its CSRF token) is refused and audited,
// the VM untouched; a user without a grant gets the same 404 as for no cluster.
func TestVMPageOffersWhatRoleAndStateAllow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	op := e.browser()
	op.login(opEmail)
	if got := strings.Join(offered(op.get("/vms/1/pve1/101").expect(t, 200).body), ","); got != "Start,Migrate" {
		t.Errorf("operator, stopped VM: %s", got)
	}
	if got := strings.Join(offered(op.get("/vms/1/pve1/100").expect(t, 200).body), ","); got != "Stop,Reboot,Force stop,Migrate" {
		t.Errorf("operator, running VM: %s", got)
	}

	v := e.browser()
	v.login(viewerEmail)
	p := v.get("/vms/1/pve1/101").expect(t, 200)
	if got := offered(p.body); len(got) != 0 {
		t.Errorf("viewer sees %v", got)
	}
	if !strings.Contains(p.body, "db-staging") {
		t.Error("the viewer does not see the VM")
	}
	for _, action := range []string{"start", "stop", "force-stop", "reboot", "migrate"} {
		p := v.post("/vms/1/pve1/101/"+action, url.Values{"target": {"pve2"}})
		if p.status != http.StatusForbidden {
			t.Errorf("viewer POST %s: %d", action, p.status)
		}
	}
	if p := v.get("/vms/1/pve1/101/migrate"); p.status != http.StatusForbidden {
		t.Errorf("viewer's migrate page: %d", p.status)
	}
	st, err := e.fleet.VMStatus(context.Background(), fleet.Actor{UserID: e.users[adminEmail].ID, Role: accounts.RoleAdmin}, e.cid, "pve1", 101)
	if err != nil || st.Status != "stopped" {
		t.Fatalf("VM 101 after the viewer's attempts: %+v %v", st, err)
	}
	// A session's denials after its first in a minute are folded into one row
	// that counts them (internal/audit); Flush writes it now.
	e.trail.Flush(context.Background())
	recs, err := e.trail.List(context.Background(), 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	var denied int64
	targets := ""
	for _, r := range recs {
		if r.Action == "access.denied" && r.UserID == e.users[viewerEmail].ID {
			denied += r.Count
			targets += r.Target + r.Params
			if r.SessionID == "" || r.Address == "" || r.RequestID == "" {
				t.Errorf("denial not attributed: %+v", r)
			}
		}
	}
	if denied != 6 { // the five POSTs and the migrate page
		t.Errorf("access.denied records of the viewer count %d denials, want 6", denied)
	}
	for _, action := range []string{"start", "stop", "force-stop", "reboot", "migrate"} {
		if !strings.Contains(targets, "UI POST /vms/1/pve1/101/"+action) {
			t.Errorf("no denial names UI POST .../%s: %s", action, targets)
		}
	}

	n := e.browser()
	n.login(nobodyEmail)
	a, b := n.get("/vms/1/pve1/101"), n.get("/vms/99/pve1/101")
	if a.status != http.StatusNotFound || b.status != http.StatusNotFound || !strings.Contains(a.body, "cluster not found") {
		t.Errorf("no grant: %d, no cluster: %d", a.status, b.status)
	}
}

// TestPowerActionsShowTheOutcome: Start, Stop (the guest of 104 ignores it:
// shutdown_timeout, with Force stop offered) and Force stop, each answering at
// once with the VM's page and its task (?task=), which then shows the outcome
// read from the task (issue 19 item 2); the audit rows name the caller.
func TestPowerActionsShowTheOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(opEmail)
	b.get("/vms/1/pve1/101")
	p := b.post("/vms/1/pve1/101/start", nil).expect(t, http.StatusSeeOther)
	if !strings.HasPrefix(p.location(), "/vms/1/pve1/101?task=UPID%3Apve1%3A") {
		t.Fatalf("after start: %s", p.location())
	}
	p = b.awaitPage(t, p.location(), "VM 101 started.")
	if !strings.Contains(p.body, `<a href="/tasks/UPID:pve1:`) ||
		strings.Join(offered(p.body), ",") != "Stop,Reboot,Force stop,Migrate" {
		t.Fatalf("after start:\n%s", p.body)
	}
	// The notice is shown once.
	if strings.Contains(b.get("/vms/1/pve1/101").body, "VM 101 started.") {
		t.Error("the notice is shown twice")
	}
	// A second Start is refused by the VM's state, said on the page.
	b.post("/vms/1/pve1/101/start", nil).expect(t, http.StatusSeeOther)
	if p := b.get("/vms/1/pve1/101"); !strings.Contains(p.body, "vm_running") {
		t.Errorf("start of a running VM:\n%s", p.body)
	}

	b.get("/vms/1/pve3/104")
	p = b.post("/vms/1/pve3/104/stop", nil).expect(t, http.StatusSeeOther)
	p = b.awaitPage(t, p.location(), "shutdown_timeout")
	if !strings.Contains(p.body, `action="/vms/1/pve3/104/force-stop"><button type="submit" class="btn btn-danger">Force stop`) {
		t.Fatalf("graceful stop of 104:\n%s", p.body)
	}
	// One Force stop, the task's: a second of the same name would leave a
	// person using a screen reader to guess which (the browser walk finds it by
	// its name).
	if got := strings.Join(offered(p.body), ","); got != "Force stop,Stop,Reboot,Migrate" {
		t.Errorf("after shutdown_timeout the page offers %s", got)
	}
	if p := b.get("/vms/1/pve3/104/force-stop").expect(t, 200); !strings.Contains(p.body, "Force stop VM 104?") {
		t.Fatalf("confirmation:\n%s", p.body)
	}
	p = b.post("/vms/1/pve3/104/force-stop", nil).expect(t, http.StatusSeeOther)
	p = b.awaitPage(t, p.location(), "VM 104 powered off.")
	if strings.Join(offered(p.body), ",") != "Start,Migrate" {
		t.Fatalf("after force stop:\n%s", p.body)
	}
	recs, _ := e.trail.List(context.Background(), 100, 0)
	ops := map[string]bool{}
	for _, r := range recs {
		if strings.HasPrefix(r.Action, "vm.") && r.UserID == e.users[opEmail].ID && r.SessionID != "" && r.RequestID != "" {
			ops[r.Action] = true
		}
	}
	if !ops["vm.start"] || !ops["vm.shutdown"] || !ops["vm.stop"] {
		t.Errorf("audited VM actions of the operator: %v", ops)
	}
}

// TestOutcomeUnknownNoticeLinksTheTaskRow: a power action whose outcome is
// unknown links the task page of vmgate's task row (its taskRef, which the API's
// X-Operation-Id names): it follows the task before PVE's UPID is known.
func TestOutcomeUnknownNoticeLinksTheTaskRow(t *testing.T) {
	t.Parallel()
	err := &errs.Error{Kind: errs.Timeout, Reason: vmops.ReasonOutcomeUnknown, Message: "vmgate could not tell",
		Details: map[string]any{"taskRef": int64(42)}}
	if ref, ok := vmops.TaskRefOf(err); !ok || ref != 42 {
		t.Fatalf("TaskRefOf: %d %v", ref, ok)
	}
	n := outcomeNotice("start", vmops.GuestRef{ClusterID: 1, Node: "pve1", VMID: 101}, vmops.Outcome{}, err)
	if n.Kind != "error" || n.Reason != vmops.ReasonOutcomeUnknown || n.TaskID != "42" {
		t.Errorf("notice %+v, want an error linking task 42", n)
	}
}

// TestMigrationFromThePage: the migrate page offers PVE's allowed nodes (VM 102's
// local disk with its choice), the form starts the migration and leads to its task
// page; the UI's event stream follows it to the end, with the VM's new node. The
// migration stands still (the emulator's clock all but stopped) until the task
// page has been read, so that the page always has a stream to follow (issue 17,
// docs/history.md).
func TestMigrationFromThePage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{speed: 1e-9})
	b := e.browser()
	b.login(opEmail)
	p := b.get("/vms/1/pve2/102/migrate").expect(t, 200)
	// The copy of local disks is offered ticked, as PVE's own migrate dialog
	// does: without it PVE refuses the migration.
	for _, s := range []string{`<label for="target">Target node</label>`, `name="withLocalDisks" id="withLocalDisks" aria-describedby="disks-hint" checked>`, "local-lvm", "Start migration"} {
		if !strings.Contains(p.body, s) {
			t.Errorf("migrate page of 102 lacks %q", s)
		}
	}
	// Without withLocalDisks PVE refuses; the form says why.
	b.post("/vms/1/pve2/102/migrate", url.Values{"target": {"pve3"}}).expect(t, http.StatusSeeOther)
	if p := b.get("/vms/1/pve2/102/migrate?target=pve3"); !strings.Contains(p.body, "migration_blocked") {
		t.Errorf("refused migration:\n%s", p.body)
	}

	p = b.post("/vms/1/pve1/100/migrate", url.Values{"target": {"pve2"}, "mode": {"online"}}).expect(t, http.StatusSeeOther)
	if !strings.HasPrefix(p.location(), "/tasks/UPID:pve1:") {
		t.Fatalf("after migrate: %s", p.location())
	}
	page := b.get(p.location()).expect(t, 200)
	if !strings.Contains(page.body, `role="progressbar"`) || !strings.Contains(page.body, `aria-valuenow=`) {
		t.Fatalf("task page:\n%s", page.body)
	}
	events := regexp.MustCompile(`data-events="([^"]*)"`).FindStringSubmatch(page.body)
	if events == nil {
		t.Fatal("no event stream on the task page")
	}
	evURL := strings.ReplaceAll(events[1], "&amp;", "&")
	if evURL == "" {
		t.Fatalf("the task page of a running migration has no stream to follow:\n%s", page.body)
	}
	e.sim.SetSpeed(50)
	{
		names, tasks, err := b.events(evURL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) < 2 || names[len(names)-1] != "end" || len(tasks) == 0 {
			t.Fatalf("events %v", names)
		}
		last := tasks[len(tasks)-1]
		if last.Result != "ok" || last.Percent != 100 || last.NewNode != "pve2" || last.VMURL != "/vms/1/pve2/100" {
			t.Fatalf("last event %+v", last)
		}
		prev := -1.0
		lines := 0
		for _, tk := range tasks {
			if tk.Percent < prev {
				t.Errorf("percent went down: %v then %v", prev, tk.Percent)
			}
			prev = tk.Percent
			lines += len(tk.Log)
		}
		if lines == 0 {
			t.Error("no log line came with the events")
		}
	}
	p = b.get("/vms/1/pve1/100").expect(t, http.StatusSeeOther) // not there any more
	if p.location() != "/vms/1/pve2/100" {
		t.Fatalf("VM 100's old address leads to %q", p.location())
	}
	done := b.get(taskPageOf(t, b, 100))
	if !strings.Contains(done.body, "is now on") || !strings.Contains(done.body, `href="/vms/1/pve2/100"`) {
		t.Errorf("the finished task page does not name the new node:\n%s", done.body)
	}
}

// taskPageOf finds the newest task of a VM on the task list.
func taskPageOf(t *testing.T, b *browser, vmid int) string {
	t.Helper()
	m := regexp.MustCompile(`href="(/tasks/UPID[^"]+)"`).FindStringSubmatch(b.get("/tasks?vmid=" + itoa(int64(vmid))).body)
	if m == nil {
		t.Fatalf("no task of VM %d listed", vmid)
	}
	return m[1]
}

// events reads one of the UI's event streams to its end; first, when not nil, is
// closed at the first event.
// It may run on a goroutine of its own, so it returns its failure.
func (b *browser) events(path string, first chan<- struct{}) (names []string, tasks []liveTask, err error) {
	return readEvents[liveTask](b, path, "task", first)
}

// readEvents reads one of the UI's event streams to its end: the names of its
// events, and the data of those named kind decoded as V. first, when not nil, is
// closed at the first event.
func readEvents[V any](b *browser, path, kind string, first chan<- struct{}) (names []string, vs []V, err error) {
	req, _ := http.NewRequest("GET", b.e.srv.URL+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Sec-Fetch-Mode", "cors")
	resp, err := b.c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		return nil, nil, fmt.Errorf("event stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
			names = append(names, event)
			if first != nil {
				close(first)
				first = nil
			}
		case strings.HasPrefix(line, "data: ") && event == kind:
			var v V
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
				return names, vs, err
			}
			vs = append(vs, v)
		}
	}
	return names, vs, sc.Err()
}

// openStream opens one of the UI's event streams on a goroutine of its own and
// returns once its first event came: done gets the event names at its end, failed
// its failure.
func (b *browser) openStream(t *testing.T, path string) (done <-chan []string, failed <-chan error) {
	t.Helper()
	d, f := make(chan []string, 1), make(chan error, 1)
	first := make(chan struct{})
	go func() {
		names, _, err := b.events(path, first)
		if err != nil {
			f <- err
			return
		}
		d <- names
	}()
	select {
	case <-first:
	case err := <-f:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stream never opened")
	}
	return d, f
}

// TestEventStreamEndsWithTheSession: logging out elsewhere ends a task's event
// stream at once (a "session" event), and a stream without a session is refused.
func TestEventStreamEndsWithTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{manualClock: true}) // the migration runs throughout
	b := e.browser()
	b.login(opEmail)
	upid, err := e.vms.Migrate(context.Background(), vmops.Actor{UserID: e.users[opEmail].ID, Email: opEmail},
		vmops.GuestRef{ClusterID: e.cid, Node: "pve1", VMID: 100}, vmops.MigrateRequest{Target: "pve3"})
	if err != nil {
		t.Fatal(err)
	}
	done, failed := b.openStream(t, taskURL(upid)+"/events")
	p, err := e.auth.Authenticate(context.Background(), b.sessionCookie())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.auth.Logout(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		t.Fatal(err)
	case names := <-done:
		if len(names) == 0 || names[len(names)-1] != "session" {
			t.Fatalf("events after logout: %v", names)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream outlived the session")
	}
	req, _ := http.NewRequest("GET", e.srv.URL+taskURL(upid)+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	if p := e.browser().do(req); p.status != http.StatusUnauthorized {
		t.Errorf("a stream without a session: %d", p.status)
	}
}

// TestEventStreamEndsOnShutdown: when vmgate drains for a shutdown, a task's event
// stream ends with a "shutdown" event and a retry hint, so the browser reconnects
// (to the replacement, or another replica) and goes on.
func TestEventStreamEndsOnShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{manualClock: true}) // the migration runs throughout
	b := e.browser()
	b.login(opEmail)
	upid, err := e.vms.Migrate(context.Background(), vmops.Actor{UserID: e.users[opEmail].ID, Email: opEmail},
		vmops.GuestRef{ClusterID: e.cid, Node: "pve1", VMID: 100}, vmops.MigrateRequest{Target: "pve3"})
	if err != nil {
		t.Fatal(err)
	}
	done, failed := b.openStream(t, taskURL(upid)+"/events")
	e.vms.Drain()
	select {
	case err := <-failed:
		t.Fatal(err)
	case names := <-done:
		if names[len(names)-1] != "shutdown" {
			t.Fatalf("events at shutdown: %v", names)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream outlived the drain")
	}
}
