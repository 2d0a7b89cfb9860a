package webui

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/frontend"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
)

// awaitPage reads the page at path until it holds every one of want (a task
// the page follows ends on the emulator's clock, not the test's).
func (b *browser) awaitPage(t *testing.T, path string, want ...string) page {
	t.Helper()
	var p page
	testkit.Until(t, "the page "+path+" saying "+strings.Join(want, ", "), func() bool {
		p = b.get(path)
		if p.status != 200 {
			return false
		}
		for _, w := range want {
			if !strings.Contains(p.body, w) {
				return false
			}
		}
		return true
	})
	return p
}

// liveEvent is one event of a live page's stream.
type liveEvent struct {
	name    string
	regions map[string]string
}

// openLive opens the live stream of the page at path and hands its events to
// the channel, which is closed at the stream's end.
func (b *browser) openLive(t *testing.T, path string) <-chan liveEvent {
	t.Helper()
	req, _ := http.NewRequest("GET", b.e.srv.URL+"/live?page="+url.QueryEscape(path), nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Sec-Fetch-Mode", "cors")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp, err := b.c.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("the live stream of %s: %d", path, resp.StatusCode)
	}
	ch := make(chan liveEvent, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		ev := liveEvent{}
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = liveEvent{name: strings.TrimPrefix(line, "event: ")}
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.regions)
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch
}

// awaitLive reads the stream's events until one's region id holds want.
func awaitLive(t *testing.T, ch <-chan liveEvent, id, want string) liveEvent {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the live stream ended before region %s said %q", id, want)
			}
			if ev.name == "regions" && strings.Contains(ev.regions[id], want) {
				return ev
			}
		case <-deadline:
			t.Fatalf("region %s never said %q", id, want)
		}
	}
}

// TestLivePagesFollowTheEmulator (issue 19 items 1, 2): a guest's page and
// the guest list, open on a live stream, show a change made straight on the
// emulator (not through vmgate) without a reload; a power action's page
// follows its task to the outcome by itself (104 ignores the shutdown:
// shutdown_timeout with Force stop); the stream is refused as the page is to
// a user without a grant; the first event holds every region of the page.
func TestLivePagesFollowTheEmulator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	v := e.browser()
	v.login(viewerEmail)
	page := v.get("/vms/1/pve1/101").expect(t, 200)
	if !strings.Contains(page.body, `data-live="/live?page=%2Fvms%2F1%2Fpve1%2F101"`) {
		t.Fatalf("the guest page names no live stream:\n%s", clip(page.body, 3000))
	}
	guest := v.openLive(t, "/vms/1/pve1/101")
	first := awaitLive(t, guest, "live-guest", "VM 101")
	if strings.Contains(first.regions["live-guest"], "backup") {
		t.Fatal("VM 101 is locked before the test locks it")
	}
	list := v.openLive(t, "/vms?q=101")
	awaitLive(t, list, "live-vms", `href="/vms/1/pve1/101"`)

	if err := e.sim.SetLock(101, "backup"); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, guest, "live-guest", `<span class="badge badge-lock">backup</span>`)
	awaitLive(t, list, "live-vms", "lock: backup")

	// A power action: the stop of 104 answers at once; the page's stream says
	// how it ended.
	op := e.browser()
	op.login(opEmail)
	op.get("/vms/1/pve3/104")
	p := op.post("/vms/1/pve3/104/stop", nil).expect(t, http.StatusSeeOther)
	stop := op.openLive(t, p.location())
	awaitLive(t, stop, "live-guest", "shutdown_timeout")

	// Refused as the page is.
	n := e.browser()
	n.login(nobodyEmail)
	req, _ := http.NewRequest("GET", e.srv.URL+"/live?page="+url.QueryEscape("/vms/1/pve1/101"), nil)
	req.Header.Set("Accept", "text/event-stream")
	if p := n.do(req); p.status != http.StatusNotFound {
		t.Errorf("a user without a grant opened the live page: %d", p.status)
	}
	for _, bad := range []string{"//evil.example/x", "https://evil.example/", "/nowhere", "/account"} {
		req, _ := http.NewRequest("GET", e.srv.URL+"/live?page="+url.QueryEscape(bad), nil)
		req.Header.Set("Accept", "text/event-stream")
		if p := v.do(req); p.status != http.StatusNotFound {
			t.Errorf("the live stream of %q: %d, want 404", bad, p.status)
		}
	}
}

// TestOutsideTasksAreListed (issue 19 item 4): a start made in PVE itself,
// with another PVE user's token, is on the task list and on the guest's page,
// marked "started in PVE by" that user, for a viewer of the cluster; its link
// names the cluster, and its page opens for the viewer.
func TestOutsideTasksAreListed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	if err := e.sim.AddToken("root@pam!cli", "outside-secret", pvesim.TokenOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := e.fleet.Cluster(context.Background(), e.cid)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", c.Endpoints[0].URL+"/api2/json/nodes/pve1/qemu/101/status/start", nil)
	req.Header.Set("Authorization", "PVEAPIToken=root@pam!cli=outside-secret")
	pc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the emulator's own certificate
	resp, err := pc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the start in PVE: %d", resp.StatusCode)
	}
	v := e.browser()
	v.login(viewerEmail)
	p := v.awaitPage(t, "/tasks", "started in PVE by root@pam!cli")
	m := regexp.MustCompile(`href="(/tasks/UPID[^"]*qmstart[^"]*\?cluster=1)"`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("the outside task has no link naming its cluster:\n%s", clip(p.body, 4000))
	}
	v.get(html.UnescapeString(m[1])).expect(t, 200)
	v.awaitPage(t, "/vms/1/pve1/101", "started in PVE by root@pam!cli")
}

// statusFleet is a Fleet whose inventory always shows VM 101 stopped on pve1
// (a snapshot that has not caught up) and whose status reads answer in turn
// from statuses, counted.
type statusFleet struct {
	frontend.Fleet
	statuses []string
	reads    int
}

func (f *statusFleet) GuestList(context.Context, fleet.Actor, int64, string, fleet.VMQuery) (fleet.VMList, error) {
	return fleet.VMList{VMs: []fleet.VMView{{VMID: 101, Node: "pve1", Status: "stopped"}}}, nil
}

func (f *statusFleet) GuestStatus(context.Context, fleet.Actor, int64, string, string, int64) (fleet.VMStatusView, error) {
	st := fleet.VMStatusView{Status: f.statuses[min(f.reads, len(f.statuses)-1)]}
	f.reads++
	return st, nil
}

// TestLiveStatusAfterATaskEnded: the live renders of a guest share its status
// while the inventory shows no change, but a render that shows a task ended
// ("VM 101 started.") reads it again if the shared one was read before the
// task was first seen ended — once, however many renders show that task — so
// the page never says "started" beside "stopped" (issue 19 item 2,
// docs/decisions/0089).
func TestLiveStatusAfterATaskEnded(t *testing.T) {
	t.Parallel()
	inner := &statusFleet{statuses: []string{"stopped", "running"}}
	f := liveFleet{Fleet: inner, status: &liveStatus{known: map[liveGuest]liveStatusEntry{}, done: map[string]uint64{}},
		now: time.Now}
	live := withLive(context.Background())
	ended := withTaskEnded(live, "UPID:pve1:00000001:00000002:6B000000:qmstart:101:vmgate@pve!gw:")
	for i, step := range []struct {
		ctx   context.Context
		want  string
		reads int
	}{
		{live, "stopped", 1},  // the first render reads it
		{live, "stopped", 1},  // the next shares it: the inventory shows no change
		{ended, "running", 2}, // the task is seen ended: read again
		{ended, "running", 2}, // once only
		{live, "running", 2},  // and every page of the guest shows that read
	} {
		st, err := f.GuestStatus(step.ctx, fleet.Actor{UserID: 1}, 1, "qemu", "pve1", 101)
		if err != nil || st.Status != step.want || inner.reads != step.reads {
			t.Fatalf("render %d: %q after %d reads, %v; want %q after %d", i, st.Status, inner.reads, err, step.want, step.reads)
		}
	}
}
