package pve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/coder/websocket"
)

// Consoles (issue 21): PVE opens a guest's console in two steps, as its own web
// UI does (pve-manager www/manager6/VNCConsole.js): a POST to vncproxy (with
// websocket=1) or termproxy starts a proxy task on the guest's node listening on
// a port and answers with that port and a ticket; then a WebSocket to
// vncwebsocket?port=…&vncticket=… is relayed by pveproxy to that port. All three
// serve API tokens (allowtoken). What speaks on the WebSocket is VNC (RFB), whose
// VNC authentication takes the ticket as password, or termproxy's framing, whose
// first line is "user:ticket\n".

// ConsoleProxy is what vncproxy and termproxy answer: where the proxy listens and
// the ticket that opens it. Ticket is a secret: never logged, never shown.
type ConsoleProxy struct {
	Port   int
	Ticket string
	User   string // the user termproxy expects in the login line (the token's user)
	UPID   string // the proxy's task
}

type consoleProxyWire struct {
	Port   flexInt    `json:"port"`
	Ticket flexString `json:"ticket"`
	User   flexString `json:"user"`
	UPID   flexString `json:"upid"`
}

// maxConsoleTicket bounds what vmgate takes as a ticket from PVE (PVE's are
// about 200 bytes).
const maxConsoleTicket = 4 << 10

// consolePath builds /nodes/{node}/{kind}/{vmid}/{sub} for the console's paths.
func consolePath(g Guest, sub string) (apiPath, error) {
	if !g.Kind.Valid() {
		return apiPath{}, fmt.Errorf("%w: unknown guest kind %q", ErrInvalidArgument, truncate(string(g.Kind), 20))
	}
	if err := checkNode("node", g.Node); err != nil {
		return apiPath{}, err
	}
	if err := checkVMID(g.VMID); err != nil {
		return apiPath{}, err
	}
	return apiPath{
		escaped: "/nodes/" + url.PathEscape(g.Node) + "/" + string(g.Kind) + "/" + strconv.Itoa(g.VMID) + "/" + sub,
		node:    g.Node,
	}, nil
}

// VNCProxy asks PVE for a VNC console of g reachable through vncwebsocket
// (POST …/vncproxy with websocket=1).
func (c *Client) VNCProxy(ctx context.Context, g Guest) (ConsoleProxy, error) {
	return c.consoleProxy(ctx, g, "vncproxy", url.Values{"websocket": {"1"}})
}

// TermProxy asks PVE for a terminal of g (POST …/termproxy): a container's
// console, or a VM's serial port serial (serial0 … serial3).
func (c *Client) TermProxy(ctx context.Context, g Guest, serial string) (ConsoleProxy, error) {
	f := url.Values{}
	if g.Kind == Qemu {
		if len(serial) != 7 || !strings.HasPrefix(serial, "serial") || serial[6] < '0' || serial[6] > '3' {
			return ConsoleProxy{}, &NotSentError{Err: fmt.Errorf("pve: %w: serial port %q", ErrInvalidArgument, truncate(serial, 20))}
		}
		f.Set("serial", serial)
	}
	return c.consoleProxy(ctx, g, "termproxy", f)
}

func (c *Client) consoleProxy(ctx context.Context, g Guest, sub string, form url.Values) (ConsoleProxy, error) {
	p, err := consolePath(g, sub)
	if err != nil {
		return ConsoleProxy{}, &NotSentError{Err: fmt.Errorf("pve: %w", err)}
	}
	var w consoleProxyWire
	res, err := c.do(ctx, call{method: http.MethodPost, path: p, form: form, limit: 64 << 10, out: &w})
	if err != nil {
		var amb *ambiguity
		if errors.As(err, &amb) {
			// The proxy PVE may have started times out by itself (10 s without a
			// connection); nothing to look for.
			return ConsoleProxy{}, fmt.Errorf("pve: POST %s: %w", p, amb.cause)
		}
		return ConsoleProxy{}, err
	}
	if err := res.dataErr; err != nil {
		return ConsoleProxy{}, fmt.Errorf("pve: POST %s at %s: %w: %v", p, res.ep.base, ErrBadResponse, err)
	}
	out := ConsoleProxy{Port: int(w.Port), Ticket: string(w.Ticket), User: string(w.User), UPID: string(w.UPID)}
	switch {
	case out.Port < 1 || out.Port > 65535:
		return ConsoleProxy{}, fmt.Errorf("pve: POST %s at %s: %w: port %d", p, res.ep.base, ErrBadResponse, out.Port)
	case out.Ticket == "" || len(out.Ticket) > maxConsoleTicket || strings.ContainsAny(out.Ticket, "\r\n\x00"):
		return ConsoleProxy{}, fmt.Errorf("pve: POST %s at %s: %w: no usable ticket", p, res.ep.base, ErrBadResponse)
	case len(out.User) > 256 || strings.ContainsAny(out.User, ":\r\n\x00"):
		return ConsoleProxy{}, fmt.Errorf("pve: POST %s at %s: %w: user %q", p, res.ep.base, ErrBadResponse, truncate(out.User, 40))
	}
	return out, nil
}

// ConsoleReadLimit bounds one WebSocket message from PVE's console (a
// framebuffer update of a large screen comes in many).
const ConsoleReadLimit = 4 << 20

// DialConsole opens the WebSocket of the console proxy (GET …/vncwebsocket),
// over the cluster's verified TLS and with the cluster's API token, trying the
// endpoints in the client's order until one upgrades. The connection is the
// caller's to close.
func (c *Client) DialConsole(ctx context.Context, g Guest, cp ConsoleProxy) (*websocket.Conn, error) {
	p, err := consolePath(g, "vncwebsocket")
	if err != nil {
		return nil, &NotSentError{Err: fmt.Errorf("pve: %w", err)}
	}
	q := url.Values{"port": {strconv.Itoa(cp.Port)}, "vncticket": {cp.Ticket}}
	hc := &http.Client{Transport: &http.Transport{
		Proxy: nil, DialTLSContext: c.dialTLS, ForceAttemptHTTP2: false, DisableCompression: true,
		MaxResponseHeaderBytes: 64 << 10, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}}
	var last error
	for _, ep := range c.order(nil) {
		u, err := requestURLText(ep.base, p, q)
		if err != nil {
			return nil, &NotSentError{Err: fmt.Errorf("pve: %w: %v", ErrInvalidArgument, err)}
		}
		dctx, cancel := context.WithTimeout(ctx, 2*c.dialTimeout)
		c.stats.requests.Add(1)
		conn, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{
			HTTPClient:   hc,
			HTTPHeader:   http.Header{"Authorization": c.authValue},
			Subprotocols: []string{"binary"},
		})
		cancel()
		if err == nil {
			conn.SetReadLimit(ConsoleReadLimit)
			return conn, nil
		}
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			// PVE answered: another endpoint would answer the same.
			return nil, &Error{StatusCode: resp.StatusCode, Reason: strings.TrimSpace(strings.TrimPrefix(resp.Status,
				strconv.Itoa(resp.StatusCode))), Method: http.MethodGet, Path: p.escaped, Endpoint: ep.base}
		}
		last = fmt.Errorf("pve: GET %s at %s: %w: %v", p, ep.base, ErrUnavailable, withoutURL(err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// withoutURL is a dial's error without the URL net/http puts in it: the URL
// carries PVE's ticket, which no log may show.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	if strings.Contains(err.Error(), "vncticket") {
		return errors.New("the WebSocket handshake failed")
	}
	return err
}
