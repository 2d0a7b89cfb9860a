package webui

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestUIPageHasADeadline: a page waits on PVE no longer than the server's
// request timeout; with PVE silent, the operator gets a page that says so
// (504, PVE did not answer in time) instead of a tab that spins for ever. PVE
// calls may take an hour here, so only the request's deadline can end it.
func TestUIPageHasADeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{requestTimeout: time.Second, pveTimeout: time.Hour})
	b := e.browser()
	b.c.Timeout = 60 * time.Second // a hang fails with a message, far sooner than go test's own timeout
	b.login(viewerEmail)
	e.sim.SetLatency(time.Hour)
	t.Cleanup(func() { e.sim.SetLatency(0) })
	p := b.get("/vms/1/pve1/100")
	if p.status != http.StatusGatewayTimeout && p.status != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 504 or 503\n%s", p.status, clip(p.body, 2000))
	}
	if !strings.Contains(p.body, "in time") && !strings.Contains(p.body, "time limit") {
		t.Errorf("the page does not say why:\n%s", clip(p.body, 2000))
	}
}

// TestUIHold: which UI requests may outlast the request timeout: an event stream
// (a task's, an operation's, a live page's) without bound, nothing else; a power
// action answers at once.
func TestUIHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cases := []struct {
		method, path string
		extra        time.Duration
		stream       bool
	}{
		{"GET", "/tasks/UPID:pve1:0000:0000:00000000:qmstart:100:a@pve:/events", 0, true},
		{"GET", "/operations/3/events", 0, true},
		{"GET", "/live", 0, true},
		{"POST", "/vms/1/pve1/100/start", 0, false}, // answers at once (issue 19 item 2)
		{"POST", "/vms/1/pve1/100/force-stop", 0, false},
		{"POST", "/vms/1/pve1/100/resume", 0, false},
		{"GET", "/vms/1/pve1/100", 0, false},
		{"POST", "/vms/1/pve1/100/migrate", 0, false},
		{"GET", "/tasks", 0, false},
		{"GET", "/nowhere", 0, false},
	}
	for _, c := range cases {
		r, err := http.NewRequest(c.method, "http://vmgate"+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		extra, stream := e.ui.Hold(r)
		if extra != c.extra || stream != c.stream {
			t.Errorf("%s %s: Hold = %v, %v; want %v, %v", c.method, c.path, extra, stream, c.extra, c.stream)
		}
	}
}

// syncBuffer is a log destination read while the server writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUILogNamesCaller: a page's request log line names its caller, as an API
// request's does (user_id and session), so an operator can tell who did what
// from the log alone; a public page's names nobody.
func TestUILogNamesCaller(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	e := newEnv(t, envOptions{log: slog.New(slog.NewTextHandler(&buf, nil))})
	b := e.browser()
	b.login(opEmail)
	b.get("/vms").expect(t, http.StatusOK)
	b.post("/vms/1/pve1/100/stop", url.Values{}).expect(t, http.StatusSeeOther)
	id := e.users[opEmail].ID
	var vms, stop, login bool
	for _, line := range strings.Split(buf.String(), "\n") {
		named := strings.Contains(line, " user_id="+itoa(id)+" session=")
		switch {
		case strings.Contains(line, `route="UI GET /vms"`):
			vms = true
			if !named {
				t.Errorf("the page's log line names no caller: %s", line)
			}
		case strings.Contains(line, `route="UI POST /vms/{clusterId}/{node}/{vmid}/stop"`):
			stop = true
			if !named {
				t.Errorf("the action's log line names no caller: %s", line)
			}
		case strings.Contains(line, `route="UI GET /login"`):
			login = true
			if strings.Contains(line, "user_id=") {
				t.Errorf("the public log-in page names a caller: %s", line)
			}
		}
	}
	if !vms || !stop || !login {
		t.Fatalf("log lines missing (vms %v, stop %v, login %v):\n%s", vms, stop, login, buf.String())
	}
}
