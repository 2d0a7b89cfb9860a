package console

import (
	"bytes"
	"context"
	"crypto/des"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/coder/websocket"
)

// The RFB handshake (RFC 6143 §7.1–7.2) on both sides of a VNC console. vmgate
// is the client of PVE's VNC server, whose VNC authentication takes PVE's ticket
// as password (as PVE's own noVNC sends it), and the server of its own client,
// to which it offers security type None: the client never learns PVE's ticket.

const (
	rfbSecNone    = 1
	rfbSecVNCAuth = 2
	rfb38         = "RFB 003.008\n"
	rfb37         = "RFB 003.007\n"
	// maxRFBReason bounds the reason text of a failed handshake vmgate reads.
	maxRFBReason = 1 << 10
)

// msgReader reads a WebSocket's messages as one byte stream, for a handshake;
// what it read beyond the handshake is rest, to be relayed first.
type msgReader struct {
	ctx  context.Context
	conn *websocket.Conn
	buf  []byte
}

func (m *msgReader) fill(n int) error {
	for len(m.buf) < n {
		_, b, err := m.conn.Read(m.ctx)
		if err != nil {
			return err
		}
		m.buf = append(m.buf, b...)
	}
	return nil
}

func (m *msgReader) next(n int) ([]byte, error) {
	if err := m.fill(n); err != nil {
		return nil, err
	}
	out := m.buf[:n:n]
	m.buf = m.buf[n:]
	return out, nil
}

func (m *msgReader) rest() []byte { return m.buf }

// errPVEHandshake marks a VNC handshake with PVE that failed.
var errPVEHandshake = errors.New("PVE's VNC server refused the handshake")

// vncLogin authenticates vmgate to PVE's VNC server with password (PVE's
// ticket), up to the point where the client's ClientInit is due. It answers the
// version PVE speaks (3.8, or 3.7) and what it read beyond the handshake.
func vncLogin(ctx context.Context, conn *websocket.Conn, password string) (version string, rest []byte, err error) {
	r := &msgReader{ctx: ctx, conn: conn}
	v, err := r.next(12)
	if err != nil {
		return "", nil, fmt.Errorf("read PVE's RFB version: %w", err)
	}
	switch string(v) {
	case rfb38, rfb37:
		version = string(v)
	default:
		if bytes.HasPrefix(v, []byte("RFB 003.")) && string(v) > rfb38 {
			version = rfb38 // a newer minor speaks 3.8 to a 3.8 client
			break
		}
		return "", nil, fmt.Errorf("%w: RFB version %q", errPVEHandshake, printable(v))
	}
	if err := conn.Write(ctx, websocket.MessageBinary, []byte(version)); err != nil {
		return "", nil, err
	}
	n, err := r.next(1)
	if err != nil {
		return "", nil, err
	}
	if n[0] == 0 {
		return "", nil, fmt.Errorf("%w: %s", errPVEHandshake, readReason(r))
	}
	types, err := r.next(int(n[0]))
	if err != nil {
		return "", nil, err
	}
	var chosen byte
	switch {
	case bytes.IndexByte(types, rfbSecVNCAuth) >= 0:
		chosen = rfbSecVNCAuth
	case bytes.IndexByte(types, rfbSecNone) >= 0:
		chosen = rfbSecNone
	default:
		return "", nil, fmt.Errorf("%w: security types %v offer neither VNC authentication nor none", errPVEHandshake, types)
	}
	if err := conn.Write(ctx, websocket.MessageBinary, []byte{chosen}); err != nil {
		return "", nil, err
	}
	if chosen == rfbSecVNCAuth {
		challenge, err := r.next(16)
		if err != nil {
			return "", nil, err
		}
		if err := conn.Write(ctx, websocket.MessageBinary, vncResponse(challenge, password)); err != nil {
			return "", nil, err
		}
	}
	if chosen == rfbSecVNCAuth || version == rfb38 {
		res, err := r.next(4)
		if err != nil {
			return "", nil, err
		}
		if binary.BigEndian.Uint32(res) != 0 {
			reason := "authentication failed"
			if version == rfb38 {
				reason = readReason(r)
			}
			return "", nil, fmt.Errorf("%w: %s", errPVEHandshake, reason)
		}
	}
	return version, r.rest(), nil
}

// readReason reads an RFB reason string (u32 length, text), bounded.
func readReason(r *msgReader) string {
	l, err := r.next(4)
	if err != nil {
		return "no reason given"
	}
	n := binary.BigEndian.Uint32(l)
	if n > maxRFBReason {
		return "a reason too long to read"
	}
	b, err := r.next(int(n))
	if err != nil {
		return "no reason given"
	}
	return printable(b)
}

// vncResponse is VNC authentication's answer to challenge: DES in ECB mode with
// the password's first 8 bytes, each byte's bits reversed, as key (RFC 6143
// §7.2.2 and the historical practice it describes).
func vncResponse(challenge []byte, password string) []byte {
	key := make([]byte, 8)
	copy(key, password)
	for i, b := range key {
		var r byte
		for j := range 8 {
			if b&(1<<j) != 0 {
				r |= 1 << (7 - j)
			}
		}
		key[i] = r
	}
	c, _ := des.NewCipher(key) // an 8-byte key never fails
	out := make([]byte, 16)
	c.Encrypt(out[:8], challenge[:8])
	c.Encrypt(out[8:], challenge[8:16])
	return out
}

// vncServe is vmgate's side of the handshake with its own client: vmgate offers
// the version PVE speaks and security type None. It answers what the client sent
// beyond the handshake (its ClientInit, usually).
func vncServe(ctx context.Context, conn *websocket.Conn, version string) ([]byte, error) {
	if err := conn.Write(ctx, websocket.MessageBinary, []byte(version)); err != nil {
		return nil, err
	}
	r := &msgReader{ctx: ctx, conn: conn}
	v, err := r.next(12)
	if err != nil {
		return nil, fmt.Errorf("read the client's RFB version: %w", err)
	}
	cv := string(v)
	if cv != rfb38 && cv != rfb37 || cv > version {
		_ = conn.Write(ctx, websocket.MessageBinary, rfbFailure("unsupported RFB version"))
		return nil, fmt.Errorf("the client's RFB version %q", printable(v))
	}
	if err := conn.Write(ctx, websocket.MessageBinary, []byte{1, rfbSecNone}); err != nil {
		return nil, err
	}
	choice, err := r.next(1)
	if err != nil {
		return nil, err
	}
	if choice[0] != rfbSecNone {
		if cv == rfb38 {
			_ = conn.Write(ctx, websocket.MessageBinary, append([]byte{0, 0, 0, 1}, rfbReason("security type not offered")...))
		}
		return nil, fmt.Errorf("the client chose security type %d", choice[0])
	}
	if cv == rfb38 {
		if err := conn.Write(ctx, websocket.MessageBinary, []byte{0, 0, 0, 0}); err != nil {
			return nil, err
		}
	}
	return r.rest(), nil
}

// rfbFailure is a server's refusal at the security types step (zero types and a
// reason).
func rfbFailure(reason string) []byte { return append([]byte{0}, rfbReason(reason)...) }

func rfbReason(reason string) []byte {
	b := make([]byte, 4, 4+len(reason))
	binary.BigEndian.PutUint32(b, uint32(len(reason)))
	return append(b, reason...)
}

// printable keeps bytes from outside printable for a message or a log.
func printable(b []byte) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c < 0x20 || c >= 0x7f {
			c = '?'
		}
		out = append(out, c)
	}
	return string(out)
}
