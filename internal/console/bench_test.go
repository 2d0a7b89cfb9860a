package console

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/vmops"
)

// BenchmarkKeystrokeEcho measures a keystroke's round trip to CT 200's shell and
// back (its echo), straight to the emulator's termproxy (as PVE's own page
// talks to it) and through vmgate's broker, in one run, and reports p50 and p99
// of each (issue 21's goal: through vmgate, p50 ≤ direct + 1 ms, p99 ≤ 1.5 ×
// direct). Each op types one character and reads until its echo arrives.
//
//	go test ./internal/console/ -run '^$' -bench KeystrokeEcho -benchtime 2000x
func BenchmarkKeystrokeEcho(b *testing.B) {
	e := newEnv(b, envOpts{})
	ctx := context.Background()

	// Direct: the emulator's termproxy with PVE's ticket, as PVE's xterm.js page.
	ct200 := pve.Guest{Kind: pve.LXC, Node: "pve1", VMID: 200}
	cp, err := e.client.TermProxy(ctx, ct200, "")
	if err != nil {
		b.Fatal(err)
	}
	direct, err := e.client.DialConsole(ctx, ct200, cp)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.CloseNow()
	if _, err := termLogin(ctx, direct, cp.User, cp.Ticket); err != nil {
		b.Fatal(err)
	}
	// Through vmgate.
	via, status := dial(b, e.srv, e.ticket(vmops.GuestCT, 200, "").Ticket)
	if status != 101 {
		b.Fatalf("WebSocket: %d", status)
	}
	for _, c := range []*websocket.Conn{direct, via} {
		readUntil(b, c, ":~# ")
	}
	lat := map[string][]time.Duration{}
	b.ResetTimer()
	for i := range b.N {
		for _, p := range []struct {
			name string
			c    *websocket.Conn
		}{{"direct", direct}, {"vmgate", via}} {
			ch := string(rune('a' + i%26))
			start := time.Now()
			if err := p.c.Write(ctx, websocket.MessageText, []byte("0:1:"+ch)); err != nil {
				b.Fatal(err)
			}
			readUntil(b, p.c, ch)
			lat[p.name] = append(lat[p.name], time.Since(start))
		}
		if i%60 == 59 { // keep the line short: Ctrl-U clears it
			for _, c := range []*websocket.Conn{direct, via} {
				_ = c.Write(ctx, websocket.MessageText, []byte("0:1:\x15"))
			}
		}
	}
	b.StopTimer()
	q := func(d []time.Duration, p float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[min(len(s)-1, int(float64(len(s))*p))]
	}
	for _, name := range []string{"direct", "vmgate"} {
		b.ReportMetric(float64(q(lat[name], 0.5).Microseconds()), name+"-p50-µs")
		b.ReportMetric(float64(q(lat[name], 0.99).Microseconds()), name+"-p99-µs")
	}
	b.Logf("p50 through vmgate − direct: %v; p99 ratio %.2f", q(lat["vmgate"], 0.5)-q(lat["direct"], 0.5),
		float64(q(lat["vmgate"], 0.99))/float64(q(lat["direct"], 0.99)))
}

// readUntil reads c's messages until what arrived holds want (messages may
// carry several echoes; the shell's line grows).
func readUntil(b testing.TB, c *websocket.Conn, want string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		_, m, err := c.Read(ctx)
		if err != nil {
			b.Fatalf("waiting for %q: %v", want, err)
		}
		got.Write(m)
	}
}

// BenchmarkFramebuffer streams full 1024×768 Raw updates of VM 100's screen,
// straight from the emulator's VNC server and through vmgate, in one run, and
// reports each one's MiB/s and their ratio (issue 21's goal: through vmgate ≥
// 0.9 × direct). Each op is one full update (3 MiB at 32 bpp) each way.
//
//	go test ./internal/console/ -run '^$' -bench Framebuffer -benchtime 200x
func BenchmarkFramebuffer(b *testing.B) {
	e := newEnv(b, envOpts{})
	ctx := context.Background()
	vm100 := pve.Guest{Kind: pve.Qemu, Node: "pve1", VMID: 100}
	cp, err := e.client.VNCProxy(ctx, vm100)
	if err != nil {
		b.Fatal(err)
	}
	direct, err := e.client.DialConsole(ctx, vm100, cp)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.CloseNow()
	if _, _, err := vncLogin(ctx, direct, cp.Ticket); err != nil {
		b.Fatal(err)
	}
	via, status := dial(b, e.srv, e.ticket(vmops.GuestVM, 100, "").Ticket)
	if status != 101 {
		b.Fatalf("WebSocket: %d", status)
	}
	if _, err := vncServeClient(ctx, via); err != nil {
		b.Fatal(err)
	}
	conns := map[string]net.Conn{}
	for name, c := range map[string]*websocket.Conn{"direct": direct, "vmgate": via} {
		nc := websocket.NetConn(ctx, c, websocket.MessageBinary)
		if _, err := nc.Write([]byte{1}); err != nil { // ClientInit
			b.Fatal(err)
		}
		si := make([]byte, 24)
		if _, err := io.ReadFull(nc, si); err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyN(io.Discard, nc, int64(binary.BigEndian.Uint32(si[20:]))); err != nil {
			b.Fatal(err)
		}
		if _, err := nc.Write([]byte{2, 0, 0, 1, 0, 0, 0, 0}); err != nil { // SetEncodings: Raw
			b.Fatal(err)
		}
		conns[name] = nc
	}
	full := []byte{3, 0, 0, 0, 0, 0, 4, 0, 3, 0} // a full 1024×768 update, not incremental
	spent := map[string]time.Duration{}
	var bytes int64
	b.ResetTimer()
	for range b.N {
		for _, name := range []string{"direct", "vmgate"} {
			nc := conns[name]
			start := time.Now()
			if _, err := nc.Write(full); err != nil {
				b.Fatal(err)
			}
			hdr := make([]byte, 4)
			if _, err := io.ReadFull(nc, hdr); err != nil {
				b.Fatal(err)
			}
			n := int64(0)
			for range binary.BigEndian.Uint16(hdr[2:]) {
				rh := make([]byte, 12)
				if _, err := io.ReadFull(nc, rh); err != nil {
					b.Fatal(err)
				}
				size := int64(binary.BigEndian.Uint16(rh[4:])) * int64(binary.BigEndian.Uint16(rh[6:])) * 4
				if _, err := io.CopyN(io.Discard, nc, size); err != nil {
					b.Fatal(err)
				}
				n += size
			}
			spent[name] += time.Since(start)
			if name == "direct" {
				bytes += n
			}
		}
	}
	b.StopTimer()
	mibs := func(name string) float64 { return float64(bytes) / (1 << 20) / spent[name].Seconds() }
	b.ReportMetric(mibs("direct"), "direct-MiB/s")
	b.ReportMetric(mibs("vmgate"), "vmgate-MiB/s")
	b.ReportMetric(mibs("vmgate")/mibs("direct"), "ratio")
}

// vncServeClient is an RFB client's side of vmgate's handshake (security type
// None), up to ClientInit.
func vncServeClient(ctx context.Context, c *websocket.Conn) ([]byte, error) {
	r := &msgReader{ctx: ctx, conn: c}
	if _, err := r.next(12); err != nil {
		return nil, err
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte(rfb38)); err != nil {
		return nil, err
	}
	if _, err := r.next(2); err != nil {
		return nil, err
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte{rfbSecNone}); err != nil {
		return nil, err
	}
	if _, err := r.next(4); err != nil {
		return nil, err
	}
	return r.rest(), nil
}

// BenchmarkIdleConsoles opens 200 terminal consoles and leaves them idle, and
// reports the live heap they added: vmgate's broker, its clients' and the
// emulator's ends together (they share this process), so an upper bound of
// what the consoles cost vmgate (issue 21's goal: ≤ 64 MiB for 200), and the
// requests vmgate sent PVE while they sat idle.
//
//	go test ./internal/console/ -run '^$' -bench IdleConsoles -benchtime 1x
func BenchmarkIdleConsoles(b *testing.B) {
	const n = 200
	for range b.N {
		e := newEnv(b, envOpts{cfg: func(c *Config) { c.PerUser, c.Total = n, n }})
		heap := func() uint64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapInuse + m.StackInuse
		}
		before := heap()
		terms := make([]*term, 0, n)
		for range n {
			c, status := dial(b, e.srv, e.ticket(vmops.GuestCT, 200, "").Ticket)
			if status != 101 {
				b.Fatalf("WebSocket: %d", status)
			}
			tm := &term{t: b, e: e, c: c}
			tm.until(":~# ")
			terms = append(terms, tm)
		}
		requests := e.client.Stats().Requests
		added := heap() - before
		if e.client.Stats().Requests != requests {
			b.Fatal("PVE was asked something while the consoles sat idle")
		}
		b.ReportMetric(float64(added)/(1<<20), "MiB-for-200")
		b.ReportMetric(float64(added)/n/1024, "KiB/console")
		for _, tm := range terms {
			tm.c.CloseNow()
		}
	}
}
