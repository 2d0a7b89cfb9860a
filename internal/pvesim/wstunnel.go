package pvesim

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// The migration tunnel's transport. The source's tunnel connects to the
// target's mtunnelwebsocket; pveproxy relays the WebSocket's bytes to the
// tunnel worker's socket (websocketUpgrade, acceptTunnel). Commands and
// answers are JSON lines, as QemuMigrate's write_tunnel and the worker's
// `while (my $line = <$conn>)` read them.

// tunnelMaxLine bounds one command or answer (a VM config is the largest, a
// few KiB).
const tunnelMaxLine = 1 << 20

// errFingerprint is a TLS handshake refused because the server's
// certificate is not the pinned one.
var errFingerprint = errors.New("fingerprint mismatch")

// pinnedTLS trusts exactly the certificate whose SHA-256 is fingerprint
// ("AB:CD:..."), as PVE::APIClient::LWP does with cached_fingerprints.
func pinnedTLS(fingerprint string) *tls.Config {
	want := strings.ToUpper(strings.ReplaceAll(fingerprint, ":", ""))
	return &tls.Config{
		InsecureSkipVerify: true, // the pin below is the verification
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errFingerprint
			}
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if strings.ToUpper(hex.EncodeToString(sum[:])) != want {
				return errFingerprint
			}
			return nil
		},
	}
}

// lineConn is one end of the tunnel: JSON lines over a byte stream.
type lineConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func newLineConn(conn net.Conn) *lineConn {
	return &lineConn{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
}

// send writes one line.
func (c *lineConn) send(msg []byte) error {
	_, err := c.conn.Write(append(append([]byte(nil), msg...), '\n'))
	return err
}

// receive reads the next line, waiting at most timeout (0: no limit).
func (c *lineConn) receive(timeout time.Duration) ([]byte, error) {
	if timeout > 0 {
		_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
		defer c.conn.SetReadDeadline(time.Time{})
	}
	var line []byte
	for {
		part, isPrefix, err := c.r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > tunnelMaxLine {
			return nil, fmt.Errorf("tunnel line of more than %d bytes", tunnelMaxLine)
		}
		if !isPrefix {
			return line, nil
		}
	}
}

func (c *lineConn) close() { c.conn.Close() }

// dialTunnel opens the tunnel's WebSocket at u with the token and the
// pinned fingerprint (proxmox-websocket-tunnel).
func dialTunnel(u *url.URL, fingerprint, apitoken string, timeout time.Duration) (*lineConn, error) {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: pinnedTLS(fingerprint)}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient:      client,
		HTTPHeader:      http.Header{"Authorization": {apitoken}},
		Subprotocols:    []string{"binary"},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("%s", resp.Status)
		}
		return nil, err
	}
	ws.SetReadLimit(tunnelMaxLine)
	return newLineConn(websocket.NetConn(context.Background(), ws, websocket.MessageBinary)), nil
}
