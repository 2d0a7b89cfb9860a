package console

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/vmops"
)

// TestVNCResponseMatchesEmulator: vmgate's answer to VNC authentication's
// challenge is the emulator's (which follows QEMU's d3des) for passwords
// shorter, as long as and longer than DES's 8 bytes.
func TestVNCResponseMatchesEmulator(t *testing.T) {
	t.Parallel()
	var ch [16]byte
	for i := range ch {
		ch[i] = byte(i*37 + 11)
	}
	for _, pw := range []string{"", "abc", "8bytes!!", "PVE:VM100:6740A0B0::a-long-ticket-of-pve"} {
		want := pvesim.VNCAuthResponse(pw, ch)
		if got := vncResponse(ch[:], pw); !bytes.Equal(got, want[:]) {
			t.Errorf("password %q: %x, want %x", pw, got, want)
		}
	}
}

// tapConn keeps every byte read through it.
type tapConn struct {
	net.Conn
	got bytes.Buffer
}

func (c *tapConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.got.Write(b[:n])
	return n, err
}

// TestVNCThroughBroker (issue 21 item 2): VM 100's screen through vmgate. The
// client is offered security type None only (vmgate answered PVE's VNC
// authentication with PVE's ticket), gets the emulator's ServerInit and its
// login prompt, and sees the login line change when it types; no byte it
// received holds PVE's ticket.
func TestVNCThroughBroker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tk := e.ticket(vmops.GuestVM, 100, "")
	if tk.Type != TypeVNC {
		t.Fatalf("a VM's default console is %q", tk.Type)
	}
	ws, status := dial(t, e.srv, tk.Ticket)
	if status != 101 {
		t.Fatalf("WebSocket: %d", status)
	}
	nc := &tapConn{Conn: websocket.NetConn(context.Background(), ws, websocket.MessageBinary)}
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second)) // against a hang only
	read := func(n int) []byte {
		t.Helper()
		b := make([]byte, n)
		if _, err := io.ReadFull(nc, b); err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
		return b
	}
	write := func(b ...byte) {
		t.Helper()
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if v := string(read(12)); v != rfb38 {
		t.Fatalf("version %q", v)
	}
	write([]byte(rfb38)...)
	if types := read(2); !bytes.Equal(types, []byte{1, rfbSecNone}) {
		t.Fatalf("security types %v, want None only", types)
	}
	write(rfbSecNone)
	if res := read(4); binary.BigEndian.Uint32(res) != 0 {
		t.Fatalf("SecurityResult %v", res)
	}
	write(1) // ClientInit, shared
	si := read(24)
	w, h := int(binary.BigEndian.Uint16(si[0:])), int(binary.BigEndian.Uint16(si[2:]))
	if name := string(read(int(binary.BigEndian.Uint32(si[20:])))); w != 1024 || h != 768 || name != "web1" {
		t.Fatalf("ServerInit %dx%d %q", w, h, name)
	}
	write(2, 0, 0, 1, 0, 0, 0, 0) // SetEncodings: Raw
	request := func(incremental byte) {
		write(3, incremental, 0, 0, 0, 0, byte(w>>8), byte(w), byte(h>>8), byte(h))
	}
	// update reads one FramebufferUpdate of Raw rectangles at 32 bpp and answers
	// how many pixels of each row are not the first pixel's colour.
	update := func() map[int]int {
		t.Helper()
		hdr := read(4)
		if hdr[0] != 0 {
			t.Fatalf("message %d, want a FramebufferUpdate", hdr[0])
		}
		rows := map[int]int{}
		for range binary.BigEndian.Uint16(hdr[2:]) {
			rh := read(12)
			ry, rw, rhh := int(binary.BigEndian.Uint16(rh[2:])), int(binary.BigEndian.Uint16(rh[4:])), int(binary.BigEndian.Uint16(rh[6:]))
			raw := read(rw * rhh * 4)
			bg := binary.LittleEndian.Uint32(raw)
			for y := range rhh {
				for x := range rw {
					if binary.LittleEndian.Uint32(raw[4*(y*rw+x):]) != bg {
						rows[ry+y]++
					}
				}
			}
		}
		return rows
	}
	request(0)
	before := update()
	if len(before) == 0 {
		t.Fatal("the console shows nothing")
	}
	for _, k := range []byte("hello\r") {
		sym := uint32(k)
		if k == '\r' {
			sym = 0xff0d
		}
		for _, down := range []byte{1, 0} {
			write(4, down, 0, 0, byte(sym>>24), byte(sym>>16), byte(sym>>8), byte(sym))
		}
	}
	request(0)
	after := update()
	changed := 0
	for y, n := range after {
		if before[y] != n {
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("typing changed nothing on the screen")
	}
	e.pve.leaks(t, nc.got.Bytes())
	if len(e.pve.tickets) == 0 {
		t.Fatal("PVE handed out no ticket")
	}
}
