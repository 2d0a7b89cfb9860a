package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/coder/websocket"

	"github.com/vmgate/vmgate/internal/console"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Consoles is internal/console as the front ends use it (issue 21): a ticket
// for a guest's console, and its redemption at the WebSocket. *console.Service
// is one.
type Consoles interface {
	Open(ctx context.Context, a vmops.Actor, req console.Request) (console.Ticket, error)
	Redeem(ctx context.Context, ticket string) (console.Relay, error)
}

var _ Consoles = (*console.Service)(nil)

// consoleWSRoute is the WebSocket's route, a stream no request deadline bounds
// (holdFor): the console's own limits do (docs/security.md item 38).
const consoleWSRoute = "GET " + console.WebSocketPath

func (s *Server) consoleRoutes() []route {
	var out []route
	for _, k := range guestKindRoutes {
		g := "/api/v1/pve/" + k.segment + "/{clusterId}/{node}/{vmid}"
		out = append(out, route{"POST", g + "/console", authed, s.openConsole(k.kind)})
	}
	// Public: the ticket in the query is the credential (a browser cannot set
	// headers on a WebSocket); the Origin is checked before it is redeemed.
	return append(out, route{"GET", console.WebSocketPath, public, s.consoleSocket})
}

// openConsole answers POST …/console {type}: a ticket for the guest's console
// (operator grant, running guest, under the caps).
func (s *Server) openConsole(kind vmops.GuestKind) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		g, err := pathGuest(r, kind)
		if err != nil {
			return err
		}
		if err := checkQuery(r); err != nil {
			return err
		}
		var in struct {
			Type *string `json:"type"`
		}
		if r.ContentLength != 0 {
			if err := decodeJSON(w, r, &in); err != nil {
				return err
			}
		}
		req := console.Request{Guest: g, SessionID: principal(r).SessionID}
		if in.Type != nil {
			req.Type = *in.Type
			if req.Type == "" {
				return errs.E(errs.Invalid, "type must be \"vnc\" or \"term\" when given")
			}
		}
		t, err := s.consoles.Open(r.Context(), vmActor(r), req)
		if err != nil {
			return err
		}
		writeData(w, t)
		return nil
	}
}

// consoleSocket redeems ?ticket= and relays the console over a WebSocket. Every
// refusal before the upgrade is an envelope like any other answer: a browser
// from another origin (403), a ticket unknown, used or expired, or whose session
// ended (401), a grant gone (404/403), the caps (429), PVE's refusal (502).
func (s *Server) consoleSocket(w http.ResponseWriter, r *http.Request) error {
	if err := sameOrigin(r); err != nil {
		return err
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || len(q) != 1 || len(q["ticket"]) != 1 {
		return errs.E(errs.Invalid, "the console's WebSocket takes exactly one query parameter, ticket")
	}
	c, err := s.consoles.Redeem(r.Context(), q.Get("ticket"))
	if err != nil {
		return err
	}
	// The connection outlives the server's read and write deadlines of a
	// request; the console's limits bound it instead.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		c.Close()
		return nil // Accept has answered
	}
	if err := c.Serve(r.Context(), ws); err != nil {
		// The connection is the WebSocket's now: the error goes to the log only.
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "console ended with an error", slog.Any("error", err))
	}
	return nil
}

// sameOrigin refuses a WebSocket opened by a page of another origin
// (docs/security.md item 37): browsers send Origin on every WebSocket, and a
// page elsewhere must not drive a console with a ticket it got hold of. A
// client that is no browser (the CLI) sends none.
func sameOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || !equalFoldASCII(u.Host, r.Host) {
		return errs.E(errs.Forbidden, "the console's WebSocket takes connections from vmgate's own pages only")
	}
	return nil
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
