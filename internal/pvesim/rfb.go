package pvesim

import (
	"bufio"
	"crypto/des"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"time"
)

// An RFB 3.8 server (RFC 6143) behind a VNC console port, as QEMU's VNC
// server (a VM, `qm vncproxy`) or vncterm (a container) answer a noVNC
// client: protocol 3.3, 3.7 or 3.8; security type 2 (VNC authentication,
// DES of a 16-byte challenge keyed with the 8-character password); the
// pixel formats a client may set (8, 16 or 32 bits per pixel, true colour);
// Raw encoding; key events; incremental updates (an incremental request
// waits until something in its area changes). The screen is a text
// console: "<host> login: " echoing what is typed.

const (
	rfbCellW     = 12 // the 5×7 glyphs, scaled ×2, in a 6×10 cell
	rfbCellH     = 20
	rfbScale     = 2
	rfbVMWidth   = 1024
	rfbVMHeight  = 768
	rfbCTWidth   = 800 // vncterm's size when the call gives none
	rfbCTHeight  = 600
	rfbMaxCut    = 1 << 20 // QEMU refuses a longer ClientCutText
	rfbBG        = 0x000000
	rfbFG        = 0xaaaaaa
	rfbSecNone   = 1
	rfbSecVNC    = 2
	rfbSecVeNCry = 19
)

// qemuAuthFailed is QEMU's SecurityResult reason, sent as C's sizeof — with
// its NUL; vncterm's (libvncserver) is "password check failed!".
const (
	qemuAuthFailed    = "Authentication failed\x00"
	vnctermAuthFailed = "password check failed!"
)

// serveVNC serves RFB on a console connection; the result is the worker's
// error ("" is TASK OK).
func (c *Cluster) serveVNC(s *consoleSession, connectedAt time.Time) string {
	l := s.l
	c.mu.Lock()
	var g *guest
	running := false
	host := ""
	if l.lxc {
		if k := c.cts[l.vmid]; k != nil {
			g, running = &k.guest, k.running
		}
		host = ctHostname(g, l.vmid)
	} else {
		if v := c.vms[l.vmid]; v != nil {
			g, running = &v.guest, v.running
		}
		host = vmHostname(g, l.vmid)
	}
	if !running {
		if !l.lxc {
			// qm vncproxy: set_password on a stopped VM.
			l.task.log(fmt.Sprintf("VM %d not running", l.vmid))
			c.mu.Unlock()
			return "Failed to run vncproxy."
		}
		c.mu.Unlock()
		return "" // lxc-console ends at once, vncterm with it
	}
	c.mu.Unlock()

	w, h := rfbVMWidth, rfbVMHeight
	name := host // QEMU's -name
	if l.lxc {
		w, h = rfbCTWidth, rfbCTHeight
		if l.width > 0 {
			w = l.width
		}
		if l.height > 0 {
			h = l.height
		}
		name = "VM " + strconv.Itoa(l.vmid)
	}
	v := &rfbConn{
		rd:       bufio.NewReaderSize(s.conn, 4096),
		wr:       bufio.NewWriterSize(s.conn, 32*1024),
		password: l.password,
		lxc:      l.lxc,
		expires:  connectedAt.Add(vncPasswordLifetime),
		now:      c.clock.Now,
		screen:   newTextScreen(w, h, host),
		name:     name,
	}
	v.serve()
	return ""
}

// rfbConn is one RFB connection; one goroutine reads the client's messages
// and answers them, so nothing in it needs a lock.
type rfbConn struct {
	rd       *bufio.Reader
	wr       *bufio.Writer
	password string
	lxc      bool
	expires  time.Time
	now      func() time.Time
	minor    int
	screen   *textScreen
	name     string
	pf       pixelFormat
	pending  *rect // an incremental request waiting for a change
	pix      []byte
}

type rect struct{ x, y, w, h int }

func (r rect) empty() bool { return r.w <= 0 || r.h <= 0 }

func (r rect) intersect(o rect) rect {
	x0, y0 := max(r.x, o.x), max(r.y, o.y)
	x1, y1 := min(r.x+r.w, o.x+o.w), min(r.y+r.h, o.y+o.h)
	return rect{x0, y0, x1 - x0, y1 - y0}
}

func (r rect) union(o rect) rect {
	if r.empty() {
		return o
	}
	if o.empty() {
		return r
	}
	x0, y0 := min(r.x, o.x), min(r.y, o.y)
	x1, y1 := max(r.x+r.w, o.x+o.w), max(r.y+r.h, o.y+o.h)
	return rect{x0, y0, x1 - x0, y1 - y0}
}

// pixelFormat is RFB's PIXEL_FORMAT.
type pixelFormat struct {
	bpp, depth             uint8
	bigEndian, trueColour  bool
	rmax, gmax, bmax       uint16
	rshift, gshift, bshift uint8
}

// QEMU's default: 32 bits, depth 24, little endian, xRGB.
var defaultPixelFormat = pixelFormat{bpp: 32, depth: 24, trueColour: true, rmax: 255, gmax: 255, bmax: 255, rshift: 16, gshift: 8, bshift: 0}

func (pf pixelFormat) bytes() []byte {
	b := make([]byte, 16)
	b[0], b[1] = pf.bpp, pf.depth
	if pf.bigEndian {
		b[2] = 1
	}
	if pf.trueColour {
		b[3] = 1
	}
	binary.BigEndian.PutUint16(b[4:], pf.rmax)
	binary.BigEndian.PutUint16(b[6:], pf.gmax)
	binary.BigEndian.PutUint16(b[8:], pf.bmax)
	b[10], b[11], b[12] = pf.rshift, pf.gshift, pf.bshift
	return b
}

func (v *rfbConn) serve() {
	if !v.handshake() {
		return
	}
	for {
		if err := v.message(); err != nil {
			return
		}
		if err := v.flushPending(); err != nil {
			return
		}
	}
}

// handshake is ProtocolVersion, security, ClientInit and ServerInit.
func (v *rfbConn) handshake() bool {
	v.wr.WriteString("RFB 003.008\n")
	if v.wr.Flush() != nil {
		return false
	}
	var ver [12]byte
	if _, err := io.ReadFull(v.rd, ver[:]); err != nil {
		return false
	}
	var major, minor int
	if n, _ := fmt.Sscanf(string(ver[:]), "RFB %03d.%03d\n", &major, &minor); n != 2 || major != 3 ||
		(minor != 3 && minor != 4 && minor != 5 && minor != 7 && minor != 8) {
		return false // QEMU: "Unsupported client version"
	}
	if minor == 4 || minor == 5 {
		minor = 3
	}
	v.minor = minor
	secType := byte(rfbSecVNC)
	if v.password == "" {
		secType = rfbSecVeNCry // vncterm without websocket=1: VeNCrypt, not emulated
	}
	if minor >= 7 {
		v.wr.Write([]byte{1, secType})
		if v.wr.Flush() != nil {
			return false
		}
		choice, err := v.rd.ReadByte()
		if err != nil {
			return false
		}
		if choice != secType || secType != rfbSecVNC {
			v.fail()
			return false
		}
	} else {
		if secType != rfbSecVNC {
			binary.Write(v.wr, binary.BigEndian, uint32(0)) // connection failed
			v.failReason("VeNCrypt is not emulated")
			return false
		}
		binary.Write(v.wr, binary.BigEndian, uint32(rfbSecVNC))
	}
	var challenge, answer [16]byte
	rand.Read(challenge[:])
	v.wr.Write(challenge[:])
	if v.wr.Flush() != nil {
		return false
	}
	if _, err := io.ReadFull(v.rd, answer[:]); err != nil {
		return false
	}
	want := vncAuthResponse(v.password, challenge)
	if subtle.ConstantTimeCompare(want[:], answer[:]) != 1 || (!v.lxc && !v.now().Before(v.expires)) {
		v.fail()
		return false
	}
	binary.Write(v.wr, binary.BigEndian, uint32(0))
	if v.wr.Flush() != nil {
		return false
	}
	if _, err := v.rd.ReadByte(); err != nil { // ClientInit's shared flag
		return false
	}
	v.pf = defaultPixelFormat
	binary.Write(v.wr, binary.BigEndian, uint16(v.screen.w))
	binary.Write(v.wr, binary.BigEndian, uint16(v.screen.h))
	v.wr.Write(v.pf.bytes())
	binary.Write(v.wr, binary.BigEndian, uint32(len(v.name)))
	v.wr.WriteString(v.name)
	return v.wr.Flush() == nil
}

// fail is a failed SecurityResult: 1, and from 3.8 on the reason.
func (v *rfbConn) fail() {
	binary.Write(v.wr, binary.BigEndian, uint32(1))
	if v.minor >= 8 {
		if v.lxc {
			v.failReason(vnctermAuthFailed)
		} else {
			v.failReason(qemuAuthFailed)
		}
		return
	}
	v.wr.Flush()
}

func (v *rfbConn) failReason(reason string) {
	binary.Write(v.wr, binary.BigEndian, uint32(len(reason)))
	v.wr.WriteString(reason)
	v.wr.Flush()
}

// vncAuthResponse is VNC authentication's answer: the challenge encrypted
// with DES, the key the password's first 8 bytes (zero-padded), each byte's
// bits mirrored.
func vncAuthResponse(password string, challenge [16]byte) [16]byte {
	var key [8]byte
	copy(key[:], password)
	for i, b := range key {
		var r byte
		for j := 0; j < 8; j++ {
			if b&(1<<j) != 0 {
				r |= 0x80 >> j
			}
		}
		key[i] = r
	}
	block, _ := des.NewCipher(key[:])
	var out [16]byte
	block.Encrypt(out[:8], challenge[:8])
	block.Encrypt(out[8:], challenge[8:])
	return out
}

// VNCAuthResponse is VNC authentication's answer to a challenge, for
// clients of the emulator (vmgate's console broker answers PVE's VNC
// authentication with it in tests).
func VNCAuthResponse(password string, challenge [16]byte) [16]byte {
	return vncAuthResponse(password, challenge)
}

// message reads and handles one client message.
func (v *rfbConn) message() error {
	typ, err := v.rd.ReadByte()
	if err != nil {
		return err
	}
	switch typ {
	case 0: // SetPixelFormat
		var b [19]byte
		if _, err := io.ReadFull(v.rd, b[:]); err != nil {
			return err
		}
		p := b[3:]
		pf := pixelFormat{bpp: p[0], depth: p[1], bigEndian: p[2] != 0, trueColour: p[3] != 0,
			rmax: binary.BigEndian.Uint16(p[4:]), gmax: binary.BigEndian.Uint16(p[6:]), bmax: binary.BigEndian.Uint16(p[8:]),
			rshift: p[10], gshift: p[11], bshift: p[12]}
		if !pf.trueColour || (pf.bpp != 8 && pf.bpp != 16 && pf.bpp != 32) {
			return fmt.Errorf("unsupported pixel format")
		}
		v.pf = pf
	case 2: // SetEncodings: Raw is always there; the others are not offered back
		var b [3]byte
		if _, err := io.ReadFull(v.rd, b[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint16(b[1:]))
		if _, err := v.rd.Discard(4 * n); err != nil {
			return err
		}
	case 3: // FramebufferUpdateRequest
		var b [9]byte
		if _, err := io.ReadFull(v.rd, b[:]); err != nil {
			return err
		}
		r := rect{int(binary.BigEndian.Uint16(b[1:])), int(binary.BigEndian.Uint16(b[3:])),
			int(binary.BigEndian.Uint16(b[5:])), int(binary.BigEndian.Uint16(b[7:]))}
		r = r.intersect(rect{0, 0, v.screen.w, v.screen.h})
		if b[0] == 0 {
			v.pending = nil
			return v.update(r)
		}
		v.pending = &r
	case 4: // KeyEvent
		var b [7]byte
		if _, err := io.ReadFull(v.rd, b[:]); err != nil {
			return err
		}
		if b[0] != 0 {
			v.screen.key(binary.BigEndian.Uint32(b[3:]))
		}
	case 5: // PointerEvent
		if _, err := v.rd.Discard(5); err != nil {
			return err
		}
	case 6: // ClientCutText
		var b [7]byte
		if _, err := io.ReadFull(v.rd, b[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(b[3:])
		if n > rfbMaxCut {
			return fmt.Errorf("cut text too long")
		}
		if _, err := v.rd.Discard(int(n)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown message %d", typ)
	}
	return nil
}

// flushPending answers a waiting incremental request once its area changed.
func (v *rfbConn) flushPending() error {
	if v.pending == nil {
		return v.wr.Flush()
	}
	r := v.screen.dirty.intersect(*v.pending)
	if r.empty() {
		return v.wr.Flush()
	}
	v.pending = nil
	return v.update(r)
}

// update sends one FramebufferUpdate of a rectangle in Raw encoding.
func (v *rfbConn) update(r rect) error {
	if d := v.screen.dirty; !d.empty() && d.intersect(r) == d {
		v.screen.dirty = rect{}
	}
	var hdr [16]byte
	hdr[0] = 0 // FramebufferUpdate
	binary.BigEndian.PutUint16(hdr[2:], 1)
	if r.empty() {
		// An empty area still gets its (empty) answer: no rectangles.
		binary.BigEndian.PutUint16(hdr[2:], 0)
		v.wr.Write(hdr[:4])
		return v.wr.Flush()
	}
	binary.BigEndian.PutUint16(hdr[4:], uint16(r.x))
	binary.BigEndian.PutUint16(hdr[6:], uint16(r.y))
	binary.BigEndian.PutUint16(hdr[8:], uint16(r.w))
	binary.BigEndian.PutUint16(hdr[10:], uint16(r.h))
	// encoding 0: Raw
	v.wr.Write(hdr[:])
	bpp := int(v.pf.bpp) / 8
	fg, bg := v.pf.encode(rfbFG), v.pf.encode(rfbBG)
	// Row by row, so that a full 1024×768 update needs no 3 MiB buffer
	// (an idle console keeps only its text).
	need := r.w * bpp
	if cap(v.pix) < need {
		v.pix = make([]byte, need)
	}
	pix := v.pix[:need]
	for y := r.y; y < r.y+r.h; y++ {
		v.screen.renderRow(pix, y, r.x, r.w, fg[:bpp], bg[:bpp])
		if _, err := v.wr.Write(pix); err != nil {
			return err
		}
	}
	return v.wr.Flush()
}

// encode is a colour (0xRRGGBB) as the client's pixel bytes.
func (pf pixelFormat) encode(rgb uint32) [4]byte {
	r, g, b := (rgb>>16)&0xff, (rgb>>8)&0xff, rgb&0xff
	px := (r*uint32(pf.rmax)/255)<<pf.rshift | (g*uint32(pf.gmax)/255)<<pf.gshift | (b*uint32(pf.bmax)/255)<<pf.bshift
	var out [4]byte
	switch pf.bpp {
	case 32:
		if pf.bigEndian {
			binary.BigEndian.PutUint32(out[:], px)
		} else {
			binary.LittleEndian.PutUint32(out[:], px)
		}
	case 16:
		if pf.bigEndian {
			binary.BigEndian.PutUint16(out[:], uint16(px))
		} else {
			binary.LittleEndian.PutUint16(out[:], uint16(px))
		}
	default:
		out[0] = byte(px)
	}
	return out
}

// textScreen is the guest's text console drawn in a framebuffer.
type textScreen struct {
	w, h       int
	cols, rows int
	cursorOn   bool
	text       [][]byte
	cx, cy     int
	host       string
	line       []byte
	password   bool // typing the password: no echo
	dirty      rect
}

func newTextScreen(w, h int, host string) *textScreen {
	s := &textScreen{w: w, h: h, cols: max(w/rfbCellW, 1), rows: max(h/rfbCellH, 1), host: host}
	s.text = make([][]byte, s.rows)
	for i := range s.text {
		s.text[i] = make([]byte, s.cols)
		for j := range s.text[i] {
			s.text[i][j] = ' '
		}
	}
	s.puts("Debian GNU/Linux 13 " + host + " tty1\n\n" + host + " login: ")
	s.drawCursor(true)
	s.dirty = rect{0, 0, w, h}
	return s
}

// puts writes text at the cursor ("\n" is a new line, scrolling at the end).
func (s *textScreen) puts(text string) {
	for i := 0; i < len(text); i++ {
		ch := text[i]
		if ch == '\n' {
			s.newline()
			continue
		}
		if ch == '\b' {
			if s.cx > 0 {
				s.cx--
				s.set(s.cx, s.cy, ' ')
			}
			continue
		}
		if s.cx >= s.cols {
			s.newline()
		}
		s.set(s.cx, s.cy, ch)
		s.cx++
	}
}

func (s *textScreen) newline() {
	s.cx = 0
	if s.cy < s.rows-1 {
		s.cy++
		return
	}
	first := s.text[0]
	copy(s.text, s.text[1:])
	for j := range first {
		first[j] = ' '
	}
	s.text[s.rows-1] = first
	s.dirty = rect{0, 0, s.w, s.h}
}

func (s *textScreen) set(x, y int, ch byte) {
	if s.text[y][x] == ch {
		return
	}
	s.text[y][x] = ch
	s.touch(x, y)
}

func (s *textScreen) touch(x, y int) {
	s.dirty = s.dirty.union(rect{x * rfbCellW, y * rfbCellH, rfbCellW, rfbCellH})
}

// drawCursor shows (or hides) the underline cursor at the cursor's cell.
func (s *textScreen) drawCursor(on bool) {
	s.cursorOn = on
	s.touch(min(s.cx, s.cols-1), s.cy)
}

// glyphTable is every glyph's rows, decoded once.
var glyphTable = func() (t [256][8]byte) {
	for i := range t {
		t[i] = glyphRows(byte(i))
	}
	return t
}()

// renderRow writes pixel row y, columns [x0, x0+w), as the client's pixel
// bytes: a cell is one blank pixel row pair, the glyph's 7 rows (8 for a
// descender) scaled ×2, and the cursor's underline near its bottom. Pixels right of or below the
// last whole cell are background.
func (s *textScreen) renderRow(out []byte, y, x0, w int, fg, bg []byte) {
	bpp := len(fg)
	cy, py := y/rfbCellH, y%rfbCellH
	gy := py/rfbScale - 1
	cursorRow := s.cursorOn && cy == s.cy && py >= rfbCellH-3 && py < rfbCellH-1
	cursorX := min(s.cx, s.cols-1)
	i := 0
	for x := x0; x < x0+w; x++ {
		cx, px := x/rfbCellW, x%rfbCellW
		on := false
		if cy < s.rows && cx < s.cols {
			if gx := px / rfbScale; gy >= 0 && gy < 8 && gx < 5 {
				on = glyphTable[s.text[cy][cx]][gy]&(0x10>>gx) != 0
			}
			if cursorRow && cx == cursorX && px < rfbCellW-2 {
				on = true
			}
		}
		if on {
			copy(out[i:i+bpp], fg)
		} else {
			copy(out[i:i+bpp], bg)
		}
		i += bpp
	}
}

// key is a key press (an X keysym): getty's login prompt and login's
// password prompt.
func (s *textScreen) key(sym uint32) {
	s.drawCursor(false)
	defer s.drawCursor(true)
	switch {
	case sym == 0xff0d || sym == 0xff8d: // Return, KP_Enter
		s.puts("\n")
		switch {
		case s.password:
			s.password = false
			s.puts("\nLogin incorrect\n" + s.host + " login: ")
		case len(s.line) == 0:
			s.puts(s.host + " login: ")
		default:
			s.password = true
			s.puts("Password: ")
		}
		s.line = s.line[:0]
	case sym == 0xff08: // BackSpace
		if len(s.line) > 0 {
			s.line = s.line[:len(s.line)-1]
			if !s.password {
				s.puts("\b")
			}
		}
	case sym >= 0x20 && sym <= 0x7e || sym >= 0xa0 && sym <= 0xff:
		if len(s.line) >= 255 {
			return
		}
		ch := byte(sym)
		if sym > 0x7e {
			ch = '?'
		}
		s.line = append(s.line, ch)
		if !s.password {
			s.puts(string(ch))
		}
	}
}
