package pvesim

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// rfbClient is a minimal RFB client over vncwebsocket, as noVNC talks.
type rfbClient struct {
	t    testing.TB
	conn net.Conn
	w, h int
	name string
}

func (e *env) dialRFB(kind string, vmid int, a proxyAnswer) net.Conn {
	e.t.Helper()
	ws, err := e.dialConsole(kind, vmid, a)
	if err != nil {
		e.t.Fatal(err)
	}
	nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
	e.t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second)) // against a hang only
	return nc
}

func (rc *rfbClient) read(n int) []byte {
	rc.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(rc.conn, b); err != nil {
		rc.t.Fatalf("read %d: %v", n, err)
	}
	return b
}

func (rc *rfbClient) write(b ...byte) {
	rc.t.Helper()
	if _, err := rc.conn.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

func u16(v int) []byte { return []byte{byte(v >> 8), byte(v)} }

// securityTo runs the handshake up to SecurityResult with a password.
func (rc *rfbClient) securityTo(password string) uint32 {
	rc.t.Helper()
	if got := string(rc.read(12)); got != "RFB 003.008\n" {
		rc.t.Fatalf("version %q", got)
	}
	rc.write([]byte("RFB 003.008\n")...)
	if got := rc.read(2); got[0] != 1 || got[1] != 2 {
		rc.t.Fatalf("security types %v", got)
	}
	rc.write(2)
	var ch [16]byte
	copy(ch[:], rc.read(16))
	resp := VNCAuthResponse(password, ch)
	rc.write(resp[:]...)
	return binary.BigEndian.Uint32(rc.read(4))
}

func (rc *rfbClient) init() {
	rc.t.Helper()
	rc.write(1)
	si := rc.read(24)
	rc.w, rc.h = int(binary.BigEndian.Uint16(si[0:])), int(binary.BigEndian.Uint16(si[2:]))
	if si[4] != 32 || si[5] != 24 || si[7] != 1 {
		rc.t.Fatalf("pixel format %v", si[4:20])
	}
	rc.name = string(rc.read(int(binary.BigEndian.Uint32(si[20:]))))
}

func (rc *rfbClient) request(incremental bool, x, y, w, h int) {
	inc := byte(0)
	if incremental {
		inc = 1
	}
	rc.write(append(append(append(append([]byte{3, inc}, u16(x)...), u16(y)...), u16(w)...), u16(h)...)...)
}

func (rc *rfbClient) key(sym uint32) {
	for _, down := range []byte{1, 0} {
		rc.write(4, down, 0, 0, byte(sym>>24), byte(sym>>16), byte(sym>>8), byte(sym))
	}
}

// update reads one FramebufferUpdate of one Raw rectangle at 32 bpp.
func (rc *rfbClient) update() (rect, []uint32) {
	rc.t.Helper()
	hdr := rc.read(4)
	if hdr[0] != 0 || binary.BigEndian.Uint16(hdr[2:]) != 1 {
		rc.t.Fatalf("update header %v", hdr)
	}
	rh := rc.read(12)
	r := rect{int(binary.BigEndian.Uint16(rh[0:])), int(binary.BigEndian.Uint16(rh[2:])), int(binary.BigEndian.Uint16(rh[4:])), int(binary.BigEndian.Uint16(rh[6:]))}
	if enc := binary.BigEndian.Uint32(rh[8:]); enc != 0 {
		rc.t.Fatalf("encoding %d", enc)
	}
	raw := rc.read(r.w * r.h * 4)
	px := make([]uint32, r.w*r.h)
	for i := range px {
		px[i] = binary.LittleEndian.Uint32(raw[4*i:])
	}
	return r, px
}

// lit counts the pixels of a rectangle's rows [y0, y1) that are not the
// background.
func lit(r rect, px []uint32, y0, y1 int) int {
	n := 0
	for y := max(y0, r.y); y < min(y1, r.y+r.h); y++ {
		for x := 0; x < r.w; x++ {
			if px[(y-r.y)*r.w+x] != rfbBG {
				n++
			}
		}
	}
	return n
}

// TestVNCConsole: a VM's VNC console over vncwebsocket — RFB 3.8, VNC
// authentication with the ticket as password (its first 8 characters are
// the password), a full update showing the login prompt, and a key press
// answering a waiting incremental request with the changed cell.
func TestVNCConsole(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	a := e.openProxy("qemu", 100, "vncproxy", url.Values{"websocket": {"1"}, "generate-password": {"0"}})
	rc := &rfbClient{t: t, conn: e.dialRFB("qemu", 100, a)}
	if res := rc.securityTo(a.Ticket); res != 0 {
		t.Fatalf("SecurityResult %d", res)
	}
	rc.init()
	if rc.w != 1024 || rc.h != 768 || rc.name != "web1" {
		t.Fatalf("ServerInit %dx%d %q", rc.w, rc.h, rc.name)
	}
	rc.write(2, 0, 0, 2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x21) // SetEncodings: Raw, DesktopSize
	rc.request(false, 0, 0, rc.w, rc.h)
	r, px := rc.update()
	if r != (rect{0, 0, 1024, 768}) {
		t.Fatalf("full update %+v", r)
	}
	loginLine := 2 * rfbCellH
	if lit(r, px, 0, rfbCellH) == 0 || lit(r, px, loginLine, loginLine+rfbCellH) == 0 {
		t.Fatal("no text on the console")
	}
	if lit(r, px, 10*rfbCellH, 11*rfbCellH) != 0 {
		t.Fatal("text where there should be none")
	}
	before := lit(r, px, loginLine, loginLine+rfbCellH)
	rc.request(true, 0, 0, rc.w, rc.h)
	rc.key('h')
	r2, px2 := rc.update()
	if r2.y != loginLine || r2.h != rfbCellH || r2.w > 3*rfbCellW {
		t.Fatalf("incremental update %+v, want the cells of the login line", r2)
	}
	if lit(r2, px2, loginLine, loginLine+rfbCellH) == 0 {
		t.Fatal("typed letter not drawn")
	}
	for _, k := range []uint32{'e', 'l', 'l', 'o', 0xff0d} {
		rc.key(k)
	}
	rc.request(false, 0, 0, rc.w, rc.h)
	r3, px3 := rc.update()
	if after := lit(r3, px3, loginLine, loginLine+rfbCellH); after <= before {
		t.Fatalf("login line: %d lit pixels before, %d after typing", before, after)
	}
	if lit(r3, px3, loginLine+rfbCellH, loginLine+2*rfbCellH) == 0 {
		t.Fatal("no Password: prompt after Enter")
	}
	rc.conn.Close()
	if st := e.wait(a.UPID); st.ExitStatus != "OK" {
		t.Fatalf("task %+v", st)
	}
}

// TestVNCAuthRefused: a wrong password gets QEMU's failure (its reason with
// the C string's NUL); a container's vncterm has its own text.
func TestVNCAuthRefused(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	a := e.openProxy("qemu", 100, "vncproxy", url.Values{"websocket": {"1"}})
	rc := &rfbClient{t: t, conn: e.dialRFB("qemu", 100, a)}
	if res := rc.securityTo("wrongpw!"); res != 1 {
		t.Fatalf("SecurityResult %d", res)
	}
	n := binary.BigEndian.Uint32(rc.read(4))
	if got := string(rc.read(int(n))); got != "Authentication failed\x00" {
		t.Fatalf("reason %q", got)
	}
	a = e.openProxy("lxc", 200, "vncproxy", url.Values{"websocket": {"1"}, "width": {"640"}, "height": {"400"}})
	rc = &rfbClient{t: t, conn: e.dialRFB("lxc", 200, a)}
	if res := rc.securityTo("wrongpw!"); res != 1 {
		t.Fatalf("SecurityResult %d", res)
	}
	n = binary.BigEndian.Uint32(rc.read(4))
	if got := string(rc.read(int(n))); got != "password check failed!" {
		t.Fatalf("vncterm's reason %q", got)
	}
	// The right password: the container's console at the asked size.
	a = e.openProxy("lxc", 200, "vncproxy", url.Values{"websocket": {"1"}, "width": {"640"}, "height": {"400"}})
	rc = &rfbClient{t: t, conn: e.dialRFB("lxc", 200, a)}
	if res := rc.securityTo(a.Password); res != 0 {
		t.Fatalf("SecurityResult %d", res)
	}
	rc.init()
	if rc.w != 640 || rc.h != 400 {
		t.Fatalf("size %dx%d", rc.w, rc.h)
	}
}

// TestVNCPasswordExpires: QEMU's VNC password expires 30 s after qm
// vncproxy set it.
func TestVNCPasswordExpires(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	a := e.openProxy("qemu", 100, "vncproxy", url.Values{"websocket": {"1"}})
	rc := &rfbClient{t: t, conn: e.dialRFB("qemu", 100, a)}
	rc.read(12)
	e.c.Advance(vncPasswordLifetime)
	rc.write([]byte("RFB 003.008\n")...)
	rc.read(2)
	rc.write(2)
	var ch [16]byte
	copy(ch[:], rc.read(16))
	resp := VNCAuthResponse(a.Password, ch)
	rc.write(resp[:]...)
	if res := binary.BigEndian.Uint32(rc.read(4)); res != 1 {
		t.Fatalf("SecurityResult %d after the password expired", res)
	}
}

// TestVNCStoppedVM: qm vncproxy fails on a stopped VM: the WebSocket opens
// and closes at once, the worker fails as PVE's does.
func TestVNCStoppedVM(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	a := e.openProxy("qemu", 101, "vncproxy", url.Values{"websocket": {"1"}})
	conn := e.dialRFB("qemu", 101, a)
	if n, err := conn.Read(make([]byte, 12)); err == nil {
		t.Fatalf("read %d bytes from a stopped VM's console", n)
	}
	st := e.wait(a.UPID)
	if st.ExitStatus != "Failed to run vncproxy." {
		t.Fatalf("task %+v", st)
	}
	if log := e.logOf(a.UPID); len(log) < 1 || log[0] != "VM 101 not running" {
		t.Fatalf("log %q", log)
	}
}
