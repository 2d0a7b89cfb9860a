package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Console types (ConsoleOpen's Type).
const (
	ConsoleVNC  = "vnc"
	ConsoleTerm = "term"
)

// ConsoleTicket is a one-use pass to a guest's console, valid until ExpiresAt
// (30 s): DialConsole connects with it.
type ConsoleTicket struct {
	URL       string    `json:"url"`
	Ticket    string    `json:"ticket"`
	Type      string    `json:"type"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// OpenConsole asks for a console of g (operator grant, a running guest): typ is
// ConsoleVNC or ConsoleTerm, "" for the guest's default (VNC for a VM, a
// terminal for a container; a VM's terminal is its serial port).
func (c *Client) OpenConsole(ctx context.Context, g GuestRef, typ string) (ConsoleTicket, error) {
	var in any
	if typ != "" {
		in = map[string]string{"type": typ}
	}
	var t ConsoleTicket
	_, err := c.do(ctx, http.MethodPost, g.Path()+"/console", nil, in, &t)
	return t, err
}

// DialConsole connects to the console of t, through the client's HTTP client
// (its TLS settings). The connection is the caller's to close. A terminal
// speaks PVE's termproxy framing (client: "0:LENGTH:DATA", "1:COLS:ROWS:", "2";
// server: the terminal's bytes); a VNC console RFB with security type None.
func (c *Client) DialConsole(ctx context.Context, t ConsoleTicket) (*websocket.Conn, error) {
	if !strings.HasPrefix(t.URL, "/") {
		return nil, fmt.Errorf("console URL %q is not a path of the server", t.URL)
	}
	u := c.base + t.URL
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http,
		HTTPHeader: http.Header{"User-Agent": {c.userAgent}}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			return nil, apiError(resp.StatusCode, resp.Header, raw)
		}
		return nil, fmt.Errorf("open the console: %w", err)
	}
	conn.SetReadLimit(1 << 20)
	return conn, nil
}
