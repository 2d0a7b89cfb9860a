package httpapi

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/sse"
	"github.com/vmgate/vmgate/internal/testkit"
)

// openStream opens the event stream at path as token and returns the answer with
// its first event read when it is one (status 200), or its body read whole (an
// error's envelope). The caller closes the body of a stream.
func openStream(t *testing.T, srv string, client *http.Client, path, token string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", srv+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	var first strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: the stream ended before its first event: %v (%q)", path, err, first.String())
		}
		first.WriteString(line)
		if line == "\n" && strings.Contains(first.String(), "event: ") {
			return resp, []byte(first.String())
		}
	}
}

// TestEventStreamsAreCappedByCount (docs/security.md item 34): with caps of 2 streams a
// session and 3 a user, a user's streams are counted by session and by user —
// a login session, a second login and an API token of the same user — and each
// stream past a cap is 429 too_many_streams with Retry-After, exactly the ones
// past it; another user is not held by them; a closed stream's slot is taken
// again. Counted, never timed: the task stays running on a clock that does not
// move, and the only wait is for the server to notice a stream was closed.
func TestEventStreamsAreCappedByCount(t *testing.T) {
	e := newVMEnvWith(t, pvesim.Options{ManualClock: true})
	limiter := sse.NewLimiter(sse.Limits{PerSession: 2, PerUser: 3})
	cfg := e.apiConfig()
	cfg.VMs, cfg.Operations, cfg.Streams = e.svc, e.ops, limiter
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.NewServer(t, api)

	upid := e.call("op", "POST", e.vmPath("pve1", 101)+"/start?wait=0", "").header.Get("X-Task-Id")
	if upid == "" {
		t.Fatal("no task")
	}
	events := taskPath(upid) + "/events"
	second, w := e.loginHTTP("view@example.org", envPassword)
	if second == "" {
		t.Fatalf("a second login: %d %s", w.Code, w.Body)
	}
	viewTok := e.newToken("view", "view-token", `{"name":"watcher"}`)

	steps := []struct {
		who    string
		token  string
		reason string // "" for a stream that opens
	}{
		{"view's first session", e.tokens["view"], ""},
		{"view's first session", e.tokens["view"], ""},
		{"view's first session, past 2 a session", e.tokens["view"], errs.ReasonTooManyStreams},
		{"view's second session", second, ""},
		{"view's second session, past 3 a user", second, errs.ReasonTooManyStreams},
		{"view's API token, past 3 a user", viewTok.Token, errs.ReasonTooManyStreams},
		{"op, another user", e.tokens["op"], ""},
	}
	var opened []*http.Response
	refused := 0
	for _, s := range steps {
		resp, body := openStream(t, srv.URL, srv.Client(), events, s.token)
		if s.reason == "" {
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "event: task") {
				t.Fatalf("%s: %d %s", s.who, resp.StatusCode, body)
			}
			opened = append(opened, resp)
			continue
		}
		var env struct {
			Code   int    `json:"code"`
			Reason string `json:"reason"`
		}
		if json.Unmarshal(body, &env) != nil || resp.StatusCode != http.StatusTooManyRequests || env.Reason != s.reason ||
			resp.Header.Get("Retry-After") != "5" {
			t.Fatalf("%s: %d %s (Retry-After %q), want 429 %s", s.who, resp.StatusCode, body, resp.Header.Get("Retry-After"), s.reason)
		}
		refused++
	}
	if refused != 3 || len(opened) != 4 || limiter.Open() != 4 {
		t.Fatalf("%d refused, %d opened, %d counted", refused, len(opened), limiter.Open())
	}

	// One of the first session's streams ends: once the server has seen it go,
	// the second session may open one again, and no more.
	opened[0].Body.Close()
	testkit.Until(t, "the closed stream no longer counted", func() bool { return limiter.Open() == 3 })
	if resp, body := openStream(t, srv.URL, srv.Client(), events, second); resp.StatusCode != http.StatusOK {
		t.Fatalf("after a stream ended: %d %s", resp.StatusCode, body)
	}
	if resp, _ := openStream(t, srv.URL, srv.Client(), events, e.tokens["view"]); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("past the user's cap again: %d", resp.StatusCode)
	}
	// The metric says what the limiter counts.
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "\nvmgate_event_streams_open 4\n") {
		t.Errorf("no vmgate_event_streams_open 4 in the metrics:\n%s", b)
	}
}
