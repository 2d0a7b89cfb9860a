package webui

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/sse"
	"github.com/vmgate/vmgate/internal/vmops"
)

// TestLivePagesShareTheStreamCaps (docs/security.md item 34): the live pages' event streams
// count in the limiter the API's streams count in. With caps of 2 a session and 3
// a user: the operator's API token holds one API stream, their browser session
// opens two live pages and its third is 429 too_many_streams with Retry-After;
// a second browser session of the same operator is refused too (the user holds
// 3, one of them the API's); the viewer, another user, opens one. Counted, never
// timed: the task stays running on a clock that does not move.
func TestLivePagesShareTheStreamCaps(t *testing.T) {
	t.Parallel()
	limiter := sse.NewLimiter(sse.Limits{PerSession: 2, PerUser: 3})
	e := newEnv(t, envOptions{manualClock: true, streams: limiter})
	ctx := context.Background()
	op := e.users[opEmail]
	upid, err := e.vms.Migrate(ctx, vmops.Actor{UserID: op.ID, Email: opEmail},
		vmops.GuestRef{ClusterID: e.cid, Node: "pve1", VMID: 100}, vmops.MigrateRequest{Target: "pve3"})
	if err != nil {
		t.Fatal(err)
	}

	// The API stream, through an API token of the operator's.
	tok, _, err := e.acc.Login(ctx, opEmail, password, "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.auth.Authenticate(ctx, tok.Raw)
	if err != nil {
		t.Fatal(err)
	}
	apiTok, err := e.acc.CreateMyToken(ctx, p, accounts.NewToken{Name: "watcher"})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/pve/task/"+upid+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+apiTok.Secret)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); resp.StatusCode != http.StatusOK || err != nil ||
		!strings.HasPrefix(line, "event: ") {
		t.Fatalf("the API stream: %d %q %v", resp.StatusCode, line, err)
	}

	refusedPage := func(b *browser) page {
		t.Helper()
		req, _ := http.NewRequest("GET", e.srv.URL+taskURL(upid)+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Sec-Fetch-Mode", "cors")
		return b.do(req)
	}
	b := e.browser()
	b.login(opEmail)
	var ends []<-chan []string
	for range 2 {
		done, _ := b.openStream(t, taskURL(upid)+"/events")
		ends = append(ends, done)
	}
	if pg := refusedPage(b); pg.status != http.StatusTooManyRequests || pg.header.Get("Retry-After") != "5" {
		t.Fatalf("the session's third stream: %d (Retry-After %q)", pg.status, pg.header.Get("Retry-After"))
	}
	b2 := e.browser()
	b2.login(opEmail)
	if pg := refusedPage(b2); pg.status != http.StatusTooManyRequests || !strings.Contains(pg.body, "one user") {
		t.Fatalf("a second session of a user holding 3: %d", pg.status)
	}
	viewer := e.browser()
	viewer.login(viewerEmail)
	done, _ := viewer.openStream(t, taskURL(upid)+"/events")
	ends = append(ends, done)
	if n := limiter.Open(); n != 4 {
		t.Fatalf("%d streams counted, want 4", n)
	}

	// The streams end with a drain (the task never does), before the server closes.
	e.vms.Drain()
	for _, done := range ends {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("a stream outlived the drain")
		}
	}
}
