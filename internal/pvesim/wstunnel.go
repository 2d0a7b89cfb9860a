package pvesim

import (
	"bufio"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The migration tunnel's WebSocket (RFC 6455), as much of it as PVE's
// proxmox-websocket-tunnel and pveproxy use between two clusters: one text
// message per JSON command and per answer, unfragmented, masked from the
// client. The emulator is both ends (the source's tunnel and the target's
// pveproxy), so nothing else of the protocol is needed.

// wsMaxMessage bounds one tunnel message (a command or an answer; a VM
// config is the largest, a few KiB).
const wsMaxMessage = 1 << 20

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// wsConn is one end of a WebSocket.
type wsConn struct {
	conn   net.Conn
	r      *bufio.Reader
	client bool // a client masks what it sends
	wmu    sync.Mutex
}

func wsAccept(key string) string {
	sum := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// wsUpgrade answers a WebSocket handshake and takes the connection over.
func wsUpgrade(w http.ResponseWriter, r *http.Request) (*wsConn, error) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || r.Header.Get("Sec-WebSocket-Key") == "" {
		http.Error(w, "websocket upgrade required", http.StatusBadRequest)
		return nil, errors.New("not a websocket handshake")
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, errors.New("connection cannot be taken over")
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		wsAccept(r.Header.Get("Sec-WebSocket-Key")))
	if err := rw.Flush(); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return &wsConn{conn: conn, r: rw.Reader}, nil
}

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

// wsDial opens the tunnel's WebSocket at u (https://host:port/path?query)
// with the given headers.
func wsDial(u *url.URL, fingerprint string, header http.Header, timeout time.Duration) (*wsConn, error) {
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", u.Host, pinnedTLS(fingerprint))
	if err != nil {
		return nil, err
	}
	key := make([]byte, 16)
	for i := range key {
		key[i] = byte(i*37 + 11)
	}
	k := base64.StdEncoding.EncodeToString(key)
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", u.RequestURI(), u.Host, k)
	for name, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", name, v)
		}
	}
	b.WriteString("\r\n")
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, b.String()); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		conn.Close()
		return nil, &httpStatusError{code: resp.StatusCode, status: resp.Status, body: body}
	}
	if resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(k) {
		conn.Close()
		return nil, errors.New("websocket handshake: wrong Sec-WebSocket-Accept")
	}
	_ = conn.SetDeadline(time.Time{})
	return &wsConn{conn: conn, r: br, client: true}, nil
}

// httpStatusError is an HTTP answer that is not the one asked for.
type httpStatusError struct {
	code   int
	status string
	body   []byte
}

func (e *httpStatusError) Error() string { return e.status }

// send writes one text message.
func (c *wsConn) send(msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeFrame(0x1, msg)
}

func (c *wsConn) writeFrame(op byte, payload []byte) error {
	hdr := []byte{0x80 | op}
	mask := byte(0)
	if c.client {
		mask = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, mask|byte(n))
	case n <= 0xffff:
		hdr = append(hdr, mask|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, mask|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	data := payload
	if c.client {
		key := [4]byte{0x5a, 0x17, 0xc3, 0x2e}
		hdr = append(hdr, key[:]...)
		data = make([]byte, len(payload))
		for i, b := range payload {
			data[i] = b ^ key[i%4]
		}
	}
	if _, err := c.conn.Write(append(hdr, data...)); err != nil {
		return err
	}
	return nil
}

// receive reads the next text message; io.EOF after a close frame.
func (c *wsConn) receive(timeout time.Duration) ([]byte, error) {
	if timeout > 0 {
		_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
		defer c.conn.SetReadDeadline(time.Time{})
	}
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return nil, err
		}
		op := h[0] & 0x0f
		if h[0]&0x80 == 0 {
			return nil, errors.New("websocket: fragmented messages are not used by the tunnel")
		}
		masked := h[1]&0x80 != 0
		if masked == c.client {
			return nil, errors.New("websocket: wrong masking")
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(c.r, b[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(c.r, b[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if n > wsMaxMessage {
			return nil, fmt.Errorf("websocket: message of %d bytes is over the tunnel's limit", n)
		}
		var key [4]byte
		if masked {
			if _, err := io.ReadFull(c.r, key[:]); err != nil {
				return nil, err
			}
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(c.r, payload); err != nil {
			return nil, err
		}
		if masked {
			for i := range payload {
				payload[i] ^= key[i%4]
			}
		}
		switch op {
		case 0x1, 0x2:
			return payload, nil
		case 0x8:
			return nil, io.EOF // the caller answers with close()
		case 0x9:
			c.wmu.Lock()
			err := c.writeFrame(0xA, payload)
			c.wmu.Unlock()
			if err != nil {
				return nil, err
			}
		case 0xA:
		default:
			return nil, fmt.Errorf("websocket: unknown opcode %d", op)
		}
	}
}

// close says goodbye and closes the connection. The client waits for the
// server's close frame: the server answers it once it has finished (the
// tunnel worker's task has ended), so the source sees the target's end.
func (c *wsConn) close() {
	c.wmu.Lock()
	_ = c.writeFrame(0x8, nil)
	c.wmu.Unlock()
	if c.client {
		for {
			if _, err := c.receive(10 * time.Second); err != nil {
				break
			}
		}
	}
	c.conn.Close()
}
