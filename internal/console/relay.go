package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Why a console ended (console.close's reason, the close frame's text).
const (
	EndClosed       = "closed"        // the client or PVE closed it
	EndIdle         = "idle"          // no input for Config.Idle
	EndMaxLength    = "max_length"    // open for Config.MaxLength
	EndSessionEnded = "session_ended" // the session or API token ended (logout, revocation, expiry)
	EndGrantLost    = "grant_lost"    // the user lost the operator grant on the cluster
	EndShutdown     = "shutdown"      // vmgate stops
	EndError        = "error"         // a relay failed
)

// Close codes vmgate sends its client (RFC 6455 §7.4.2: 4000–4999 are the
// application's).
const (
	closeEnded = websocket.StatusCode(4000) // ended by a limit or a revocation; the reason says which
)

const (
	// clientReadLimit bounds one client message (a paste is the largest).
	clientReadLimit = 1 << 20
	// handshakeTimeout bounds the client's side of a VNC handshake.
	handshakeTimeout = 10 * time.Second
	// recheckRetry is how soon a re-check the store could not answer is tried again.
	recheckRetry = 5 * time.Second
)

// Console is one redeemed ticket: vmgate is logged in to PVE's console and
// waits for Serve to relay it to the client.
type Console struct {
	s       *Service
	t       store.ConsoleTicket
	h       holder
	pve     *websocket.Conn
	version string // VNC: the RFB version PVE speaks
	pending []byte // what PVE sent beyond the login, for the client first
	addr    string
	started time.Time

	lastInput       atomic.Int64 // unix nanoseconds on the service's clock
	toPVE, toClient atomic.Int64
	recheck         chan struct{}
	endOnce         sync.Once
	why             atomic.Value // string
	stop            chan struct{}
	releaseOnce     sync.Once
}

// Relay is a redeemed console as a front end serves it.
type Relay interface {
	// Serve relays between client and PVE until the console ends.
	Serve(ctx context.Context, client *websocket.Conn) error
	// Close gives up a console that will not be served.
	Close()
}

var _ Relay = (*Console)(nil)

// Redeem turns a ticket into a console: the ticket once (on any replica), the
// credential it was issued to still standing with its operator grant, a slot
// under the caps, and vmgate logged in to PVE's console. The caller serves it
// (Serve) or closes it (Close).
func (s *Service) Redeem(ctx context.Context, ticket string) (Relay, error) {
	if len(ticket) == 0 || len(ticket) > 128 {
		return nil, errs.E(errs.Unauthenticated, "no console ticket, or not one of vmgate's")
	}
	t, err := s.cfg.Store.RedeemConsoleTicket(ctx, ticketHash(ticket), s.cfg.Now())
	if errs.Is(err, errs.NotFound) {
		return nil, errs.E(errs.Unauthenticated, "the console ticket is unknown, used or expired")
	}
	if err != nil {
		return nil, err
	}
	h, err := s.live(ctx, t)
	if err != nil {
		return nil, err
	}
	c := &Console{s: s, t: t, h: h, addr: audit.FactsFrom(ctx).Address, recheck: make(chan struct{}, 1),
		stop: make(chan struct{})}
	if err := s.add(c); err != nil {
		return nil, err
	}
	if err := c.login(ctx); err != nil {
		s.remove(c)
		return nil, err
	}
	c.started = s.cfg.Now()
	c.lastInput.Store(c.started.UnixNano())
	s.metrics.opened.WithLabelValues(t.Type).Inc()
	s.cfg.Audit.Append(ctx, c.record("console.open", "ok", ""))
	return c, nil
}

// login opens PVE's console and logs vmgate in: the VNC handshake with PVE's
// ticket as password, or termproxy's login line and its "OK".
func (c *Console) login(ctx context.Context) error {
	g := guestOf(c.t)
	api, err := c.s.cfg.Connect(ctx, c.t.ClusterID)
	if err != nil {
		return err
	}
	var cp pve.ConsoleProxy
	if c.t.Type == TypeVNC {
		cp, err = api.VNCProxy(ctx, g)
	} else {
		serial := ""
		if c.t.GuestKind == store.GuestQemu {
			serial = VMSerial
		}
		cp, err = api.TermProxy(ctx, g, serial)
	}
	if err != nil {
		return upstreamErr(err)
	}
	conn, err := api.DialConsole(ctx, g, cp)
	if err != nil {
		return upstreamErr(err)
	}
	if c.t.Type == TypeVNC {
		c.version, c.pending, err = vncLogin(ctx, conn, cp.Ticket)
	} else {
		c.pending, err = termLogin(ctx, conn, cp.User, cp.Ticket)
	}
	if err != nil {
		conn.CloseNow()
		return errs.Wrap(errs.Upstream, err, "PVE did not open the console of %s", c.name())
	}
	c.pve = conn
	return nil
}

// termLogin sends termproxy's login line and reads its "OK"; it answers the
// terminal's bytes that came with it.
func termLogin(ctx context.Context, conn *websocket.Conn, user, ticket string) ([]byte, error) {
	if err := conn.Write(ctx, websocket.MessageText, []byte(user+":"+ticket+"\n")); err != nil {
		return nil, fmt.Errorf("send the terminal's login: %w", err)
	}
	r := &msgReader{ctx: ctx, conn: conn}
	ok, err := r.next(2)
	if err != nil {
		return nil, fmt.Errorf("read the terminal's answer to the login: %w", err)
	}
	if string(ok) != "OK" {
		return nil, fmt.Errorf("termproxy refused the login (%q)", printable(ok))
	}
	return r.rest(), nil
}

// Close gives up a console that will not be served (the client's upgrade failed).
func (c *Console) Close() {
	c.end(EndError)
	c.finish(context.Background())
}

// Serve relays between the client and PVE until either closes, a limit or a
// revocation ends the console, or ctx ends; then it closes both sides, gives the
// slot back and audits console.close.
func (c *Console) Serve(ctx context.Context, client *websocket.Conn) error {
	defer c.finish(ctx)
	client.SetReadLimit(clientReadLimit)
	if c.t.Type == TypeVNC {
		hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		rest, err := vncServe(hctx, client, c.version)
		cancel()
		if err != nil {
			c.end(EndError)
			client.Close(websocket.StatusProtocolError, "RFB handshake failed")
			return fmt.Errorf("console of %s: %w", c.name(), err)
		}
		if len(rest) > 0 {
			if err := c.pve.Write(ctx, websocket.MessageBinary, rest); err != nil {
				c.end(EndClosed)
				return nil
			}
			c.count(&c.toPVE, c.s.metrics.toPVE, len(rest))
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan string, 2)
	go func() { done <- c.fromPVE(rctx, client) }()
	go func() { done <- c.fromClient(rctx, client) }()
	why := c.supervise(rctx, done)
	c.end(why)
	// Closed before rctx ends: a read whose context ends closes its connection
	// at once, without the close frame that tells the client why.
	if why == EndClosed || why == EndError {
		client.Close(websocket.StatusNormalClosure, "")
	} else {
		client.Close(closeEnded, why)
	}
	c.pve.Close(websocket.StatusNormalClosure, "")
	return nil
}

// supervise waits for a relay to end, a limit or a revocation, and says why the
// console ends.
func (c *Console) supervise(ctx context.Context, done <-chan string) string {
	cfg := c.s.cfg
	retry := time.Time{}
	for {
		now := cfg.Now()
		idleLeft := cfg.Idle - now.Sub(time.Unix(0, c.lastInput.Load()))
		lenLeft := cfg.MaxLength - now.Sub(c.started)
		credLeft := c.h.until.Sub(now)
		switch {
		case idleLeft <= 0:
			return EndIdle
		case lenLeft <= 0:
			return EndMaxLength
		case !c.h.until.IsZero() && credLeft <= 0:
			return EndSessionEnded
		}
		wait := min(idleLeft, lenLeft)
		if !c.h.until.IsZero() {
			wait = min(wait, credLeft)
		}
		if !retry.IsZero() {
			wait = min(wait, max(retry.Sub(now), 0))
		}
		select {
		case why := <-done:
			return why
		case <-c.stop:
			return c.reason()
		case <-ctx.Done():
			return EndShutdown
		case <-c.recheck:
		case <-cfg.After(wait):
			if retry.IsZero() || cfg.Now().Before(retry) {
				continue
			}
		}
		retry = time.Time{}
		if why, again := c.check(ctx); why != "" {
			return why
		} else if again {
			retry = cfg.Now().Add(recheckRetry)
		}
	}
}

// check reads the console's credential and grant again: the reason to end, or
// again when the store could not answer (the check is repeated soon).
func (c *Console) check(ctx context.Context) (why string, again bool) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := c.s.live(cctx, c.t)
	if err == nil {
		c.h = h
		return "", false
	}
	switch errs.KindOf(err) {
	case errs.Unauthenticated:
		return EndSessionEnded, false
	case errs.NotFound, errs.Forbidden:
		return EndGrantLost, false
	}
	c.s.log.LogAttrs(ctx, slog.LevelWarn, "console: cannot check the console's session and grant now",
		slog.String("guest", c.name()), slog.Any("error", err))
	return "", true
}

// fromPVE relays PVE's console to the client, message by message, streamed.
func (c *Console) fromPVE(ctx context.Context, client *websocket.Conn) string {
	if len(c.pending) > 0 {
		if err := client.Write(ctx, websocket.MessageBinary, c.pending); err != nil {
			return EndClosed
		}
		c.count(&c.toClient, c.s.metrics.toClient, len(c.pending))
		c.pending = nil
	}
	buf := make([]byte, 32<<10)
	for {
		typ, r, err := c.pve.Reader(ctx)
		if err != nil {
			return endOf(err)
		}
		w, err := client.Writer(ctx, typ)
		if err != nil {
			return EndClosed
		}
		n, err := io.CopyBuffer(w, r, buf)
		c.count(&c.toClient, c.s.metrics.toClient, int(n))
		if err != nil {
			return endOf(err)
		}
		if err := w.Close(); err != nil {
			return EndClosed
		}
	}
}

// fromClient relays the client's input to PVE. Every message is input except a
// terminal's ping ("2") and a VNC client's bare framebuffer update requests,
// which a client sends whether or not anybody is there.
func (c *Console) fromClient(ctx context.Context, client *websocket.Conn) string {
	for {
		typ, b, err := client.Read(ctx)
		if err != nil {
			return endOf(err)
		}
		if c.isInput(b) {
			c.lastInput.Store(c.s.cfg.Now().UnixNano())
		}
		if err := c.pve.Write(ctx, typ, b); err != nil {
			return endOf(err)
		}
		c.count(&c.toPVE, c.s.metrics.toPVE, len(b))
	}
}

func (c *Console) isInput(b []byte) bool {
	if c.t.Type == TypeTerm {
		return !(len(b) == 1 && b[0] == '2')
	}
	if len(b) == 0 || len(b)%10 != 0 {
		return true
	}
	for i := 0; i < len(b); i += 10 {
		if b[i] != 3 { // FramebufferUpdateRequest
			return true
		}
	}
	return false
}

func (c *Console) count(total *atomic.Int64, m interface{ Add(float64) }, n int) {
	if n <= 0 {
		return
	}
	total.Add(int64(n))
	m.Add(float64(n))
	c.s.metrics.relayed.Add(int64(n))
}

// endOf says why a relay ended from its error: a close by either side, or a
// connection that failed.
func endOf(err error) string {
	if errors.Is(err, context.Canceled) || websocket.CloseStatus(err) != -1 || errors.Is(err, io.EOF) {
		return EndClosed
	}
	return EndError
}

func guestOf(t store.ConsoleTicket) pve.Guest {
	k := pve.Qemu
	if t.GuestKind == store.GuestLXC {
		k = pve.LXC
	}
	return pve.Guest{Kind: k, Node: t.Node, VMID: int(t.VMID)}
}

// upstreamErr words a PVE failure for the client (fleet's mapping of PVE's errors).
func upstreamErr(err error) error { return fleet.UpstreamError(err) }

// end asks the console to end for why (the first reason stays).
func (c *Console) end(why string) {
	c.endOnce.Do(func() {
		c.why.Store(why)
		close(c.stop)
	})
}

func (c *Console) reason() string {
	if why, ok := c.why.Load().(string); ok {
		return why
	}
	return EndClosed
}

// recheckSoon asks the console to check its credential and grant again.
func (c *Console) recheckSoon() {
	select {
	case c.recheck <- struct{}{}:
	default:
	}
}

// finish gives the slot back and audits console.close, once.
func (c *Console) finish(ctx context.Context) {
	c.releaseOnce.Do(func() {
		if c.pve != nil {
			c.pve.CloseNow()
		}
		c.s.remove(c)
		why := c.reason()
		c.s.metrics.ended.WithLabelValues(why).Inc()
		result := "ok"
		c.s.cfg.Audit.Append(context.WithoutCancel(ctx), c.record("console.close", result, why))
	})
}

// record is an audit record of the console, attributed to its ticket's holder.
func (c *Console) record(action, result, why string) store.AuditRecord {
	session := c.t.SessionID
	if c.t.APITokenID != "" {
		session = "token:" + c.t.APITokenID
	}
	params := map[string]any{"type": c.t.Type}
	if action == "console.close" {
		params["seconds"] = int64(c.s.cfg.Now().Sub(c.started) / time.Second)
		params["bytesToClient"] = c.toClient.Load()
		params["bytesToPVE"] = c.toPVE.Load()
		params["why"] = why
	}
	return store.AuditRecord{Action: action, UserID: c.t.UserID, UserEmail: c.h.actor.Email, SessionID: session,
		ClusterID: c.t.ClusterID, Node: c.t.Node, VMID: c.t.VMID, Target: c.name(), Params: audit.Params(params),
		Result: result, Address: c.addr}
}

func (c *Console) name() string {
	if c.t.GuestKind == store.GuestLXC {
		return fmt.Sprintf("CT %d on %s", c.t.VMID, c.t.Node)
	}
	return fmt.Sprintf("VM %d on %s", c.t.VMID, c.t.Node)
}
