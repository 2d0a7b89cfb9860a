package pvesim

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// wsTarget is the console port a vncwebsocket answer relays to.
type wsTarget struct {
	local string
	port  int
	// socket is a migration tunnel worker's socket (mtunnel.go); port is
	// unused then.
	socket string
}

// wsMaxPayload is pveproxy's largest WebSocket frame, both ways
// (websocket_proxy's $max_payload_size).
const wsMaxPayload = 128 * 1024

// websocketUpgrade is pve-http-server's handle_api2_request for a GET on a
// path ending in "websocket" with an Upgrade header: the upgrade is checked
// after the handler ran (a bad upgrade is a 501 whatever the handler said),
// then a 200 answer becomes the relay to the console port. It reports
// whether it took over the connection.
func (c *Cluster) websocketUpgrade(w http.ResponseWriter, r *http.Request, resp *response) bool {
	upgrade := strings.ToLower(r.Header.Get("Upgrade"))
	if upgrade == "" || r.Method != "GET" || !strings.HasSuffix(r.URL.Path, "websocket") {
		return false
	}
	bad := func(msg string) bool {
		*resp = response{status: http.StatusNotImplemented, message: msg, empty: true}
		return false
	}
	if upgrade != "websocket" {
		return bad("unable to upgrade to protocol '" + upgrade + "'")
	}
	if v := r.Header.Get("Sec-WebSocket-Version"); v != "13" {
		return bad("unsupported websocket-version '" + v + "'")
	}
	protos := r.Header.Get("Sec-WebSocket-Protocol")
	if protos == "" {
		return bad("missing websocket-protocol header")
	}
	proto := ""
	for _, p := range splitList(protos) {
		if p == "base64" && proto == "" || p == "binary" {
			proto = p
		}
	}
	if proto == "" {
		return bad("unsupported websocket-protocol protocol '" + protos + "'")
	}
	if r.Header.Get("Sec-WebSocket-Key") == "" {
		return bad("missing websocket-key")
	}
	if resp.status != http.StatusOK || resp.upgrade == nil {
		return false
	}
	c.relayWebsocket(w, r, resp.upgrade, proto)
	return true
}

// relayWebsocket is websocket_proxy: connect to the port first (nothing
// listening: the connection is dropped without an answer), then 101 and
// relay — every text or binary frame's payload to the port, the port's bytes
// as binary frames of at most 128 KiB. pveproxy checks no Origin; the
// ticket is the guard.
func (c *Cluster) relayWebsocket(w http.ResponseWriter, r *http.Request, to *wsTarget, proto string) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		once sync.Once
		ws   *websocket.Conn
		mu   sync.Mutex
	)
	closeWS := func() {
		once.Do(func() {
			cancel()
			mu.Lock()
			if ws != nil {
				ws.CloseNow()
			}
			mu.Unlock()
		})
	}
	proxyEnd, consoleEnd := net.Pipe()
	if !c.acceptOn(to, consoleEnd, closeWS) {
		cancel()
		proxyEnd.Close()
		consoleEnd.Close()
		hangUp(w)
		return
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:       []string{proto},
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		closeWS()
		proxyEnd.Close()
		return
	}
	conn.SetReadLimit(wsMaxPayload)
	mu.Lock()
	ws = conn
	mu.Unlock()
	select {
	case <-ctx.Done(): // the console ended before the upgrade was done
		conn.CloseNow()
		proxyEnd.Close()
		return
	default:
	}
	go func() { // client → console
		defer closeWS()
		defer proxyEnd.Close()
		for {
			typ, rd, err := conn.Reader(ctx)
			if err != nil {
				return
			}
			if typ != websocket.MessageBinary && typ != websocket.MessageText {
				return
			}
			if _, err := io.Copy(proxyEnd, rd); err != nil {
				return
			}
		}
	}()
	go func() { // console → client
		defer closeWS()
		defer proxyEnd.Close()
		buf := make([]byte, wsMaxPayload)
		for {
			n, err := proxyEnd.Read(buf)
			if n > 0 {
				if werr := conn.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return // the console ended (EOF) or the relay did
			}
		}
	}()
}
