package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/console"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// fakeConsoles is the console broker as the adapter sees it: Open answers a
// ticket and records what it was asked; Redeem refuses or serves a relay that
// writes one message.
type fakeConsoles struct {
	asked  []console.Request
	actors []vmops.Actor
	redeem func(ticket string) (console.Relay, error)
}

func (f *fakeConsoles) Open(_ context.Context, a vmops.Actor, req console.Request) (console.Ticket, error) {
	f.asked, f.actors = append(f.asked, req), append(f.actors, a)
	if req.Type == "rdp" {
		return console.Ticket{}, errs.E(errs.Invalid, "type must be vnc or term")
	}
	typ := req.Type
	if typ == "" {
		typ = console.TypeVNC
	}
	return console.Ticket{URL: console.WebSocketPath + "?ticket=abc", Ticket: "abc", Type: typ,
		ExpiresAt: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}, nil
}

func (f *fakeConsoles) Redeem(_ context.Context, ticket string) (console.Relay, error) {
	return f.redeem(ticket)
}

type helloRelay struct{ closed bool }

func (h *helloRelay) Serve(ctx context.Context, c *websocket.Conn) error {
	_ = c.Write(ctx, websocket.MessageBinary, []byte("hello"))
	return c.Close(websocket.StatusNormalClosure, "")
}
func (h *helloRelay) Close() { h.closed = true }

func newConsoleEnv(t *testing.T) (*testEnv, *fakeConsoles, http.Handler) {
	e := newTestEnv(t)
	e.addUser("op", accounts.RoleUser)
	f := &fakeConsoles{redeem: func(string) (console.Relay, error) {
		return nil, errs.E(errs.Unauthenticated, "the console ticket is unknown, used or expired")
	}}
	cfg := e.apiConfig()
	cfg.Consoles = f
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, f, apitest.Wrap(t, api)
}

// TestOpenConsoleRoute (issue 21 item 1): POST …/console decodes an optional
// {type} and hands the use case the guest, the caller and its session; it answers
// 200 with the ticket; a body with an unknown field is 400 before the use case.
func TestOpenConsoleRoute(t *testing.T) {
	e, f, h := newConsoleEnv(t)
	w := e.doWith(h, "op", "POST", "/api/v1/pve/vm/3/pve1/100/console", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"url":"/api/v1/console/ws?ticket=abc"`) {
		t.Fatalf("VM console: %d %s", w.Code, w.Body)
	}
	w = e.doWith(h, "op", "POST", "/api/v1/pve/lxc/3/pve1/200/console", `{"type":"term"}`)
	if w.Code != 200 {
		t.Fatalf("CT console: %d %s", w.Code, w.Body)
	}
	if len(f.asked) != 2 || f.asked[0].Guest != (vmops.GuestRef{ClusterID: 3, Node: "pve1", Kind: vmops.GuestVM, VMID: 100}) ||
		f.asked[1].Type != console.TypeTerm || f.asked[1].Guest.Kind != vmops.GuestCT || f.asked[0].SessionID == "" ||
		f.actors[0].UserID != e.users["op"].ID {
		t.Fatalf("asked %+v by %+v", f.asked, f.actors)
	}
	for _, body := range []string{`{"type":"vnc","x":1}`, `{"type":""}`, `{"type":"rdp"}`} {
		if w := e.doWith(h, "op", "POST", "/api/v1/pve/vm/3/pve1/100/console", body); w.Code != 400 {
			t.Errorf("body %s: %d", body, w.Code)
		}
	}
	if w := e.doWith(h, "", "POST", "/api/v1/pve/vm/3/pve1/100/console", ""); w.Code != 401 {
		t.Errorf("no token: %d", w.Code)
	}
}

// TestConsoleSocketRoute (docs/security.md item 37): the WebSocket refuses a
// page of another origin (403) before the ticket is redeemed, takes exactly one
// query parameter, answers the use case's refusal as an envelope (401), and
// upgrades a redeemed ticket from the same origin or from a client without one.
func TestConsoleSocketRoute(t *testing.T) {
	_, f, h := newConsoleEnv(t)
	redeemed := 0
	f.redeem = func(ticket string) (console.Relay, error) {
		redeemed++
		if ticket != "good" {
			return nil, errs.E(errs.Unauthenticated, "unknown")
		}
		return &helloRelay{}, nil
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ws := "ws" + strings.TrimPrefix(srv.URL, "http") + console.WebSocketPath
	status := func(query, origin string) int {
		t.Helper()
		hdr := http.Header{}
		if origin != "" {
			hdr.Set("Origin", origin)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, ws+query, &websocket.DialOptions{HTTPHeader: hdr})
		if err != nil {
			if resp == nil {
				t.Fatal(err)
			}
			return resp.StatusCode
		}
		defer c.CloseNow()
		_, b, err := c.Read(ctx)
		if err != nil || string(b) != "hello" {
			t.Fatalf("relay: %q %v", b, err)
		}
		return 101
	}
	if got := status("?ticket=good", "https://evil.example"); got != 403 || redeemed != 0 {
		t.Fatalf("another origin: %d (redeemed %d)", got, redeemed)
	}
	if got := status("?ticket=good&x=1", ""); got != 400 {
		t.Fatalf("two parameters: %d", got)
	}
	if got := status("?ticket=bad", ""); got != 401 {
		t.Fatalf("a bad ticket: %d", got)
	}
	if got := status("?ticket=good", srv.URL); got != 101 {
		t.Fatalf("same origin: %d", got)
	}
	if got := status("?ticket=good", ""); got != 101 {
		t.Fatalf("no origin (the CLI): %d", got)
	}
}
