package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/console"
	"github.com/vmgate/vmgate/internal/pve"
)

// The console goals (issue 21 (docs/history.md)), measured in one run against
// the dev emulator process, straight (as PVE's own pages talk to it: vncproxy or
// termproxy, then vncwebsocket with PVE's ticket) and through a vmgate process
// of its own (POST …/console, then its WebSocket), so that its RSS and CPU time
// are the consoles' alone:
//
//   - keystroke to echo: one character typed into CT 200's shell, read back;
//     the two paths in turn, key by key;
//   - framebuffer: full-screen Raw updates of VM 100 (1024×768 at 32 bpp, 3 MiB
//     each) requested and read whole, the two paths in turn; vmgate's CPU time
//     over the stream divided by the MiB it relayed;
//   - idle: n terminal consoles opened through vmgate and left alone; vmgate's
//     RSS with them − before them, and the requests the emulator served while
//     they sat idle.

// consoleIdleBudget is issue 21's RSS budget for 200 idle consoles.
const consoleIdleBudget = 64 << 20

// consoleLimit bounds the whole measurement (its default run takes about 20 s).
const consoleLimit = 5 * time.Minute

func consoleGoals(c config) []*goal {
	return []*goal{
		{id: "console.key.p50", measurement: "console", what: fmt.Sprintf("keystroke to echo (CT 200's shell), %d keys, p50", c.consoleKeys), want: "≤ direct + 1 ms"},
		{id: "console.key.p99", measurement: "console", what: fmt.Sprintf("keystroke to echo (CT 200's shell), %d keys, p99", c.consoleKeys), want: "≤ 1.5 × direct"},
		{id: "console.frames", measurement: "console", what: fmt.Sprintf("framebuffer stream, %d full-screen Raw updates (VM 100)", c.consoleFrames), want: "≥ 0.90 × direct"},
		{id: "console.cpu", measurement: "console", what: "vmgate's CPU time per relayed MiB of framebuffer", want: "stated"},
		{id: "console.idle.rss", measurement: "console", what: fmt.Sprintf("vmgate's RSS with %d idle terminal consoles − with none", c.consoleIdle), want: "≤ 64 MiB"},
		{id: "console.idle.pve", measurement: "console", what: fmt.Sprintf("PVE requests while %d consoles sit idle for %s", c.consoleIdle, c.consoleIdleWait), want: "0"},
	}
}

// consoleRun is the state of one console measurement.
type consoleRun struct {
	b      *bench
	vg     *vmgateProc
	vc     *client.Client // the admin, to the console's vmgate
	pc     *pve.Client    // the emulator's token, straight to it
	cid    int64          // the emulator as a cluster of that vmgate
	opened []*websocket.Conn
}

// measureConsole measures the console goals.
func (b *bench) measureConsole(ctx context.Context) error {
	// A bound on the whole measurement: its WebSockets have no other deadline.
	ctx, cancel := context.WithTimeout(ctx, consoleLimit)
	defer cancel()
	r := &consoleRun{b: b}
	defer func() {
		for _, c := range r.opened {
			c.CloseNow()
		}
		if r.vg != nil { // its CPU is not the next measurement's noise
			b.procs.stop(r.vg.proc, 5*time.Second)
		}
	}()
	if err := r.setup(ctx); err != nil {
		return err
	}
	// Idle first: the baseline RSS is vmgate's before any console, not after the
	// framebuffer stream has grown its heap.
	if err := r.idle(ctx); err != nil {
		return fmt.Errorf("idle consoles: %w", err)
	}
	if err := r.keys(ctx); err != nil {
		return fmt.Errorf("keystrokes: %w", err)
	}
	if err := r.frames(ctx); err != nil {
		return fmt.Errorf("framebuffer: %w", err)
	}
	return nil
}

// setup starts the console's vmgate (caps above the idle consoles), registers
// the dev emulator on it and makes the direct client.
func (r *consoleRun) setup(ctx context.Context) error {
	b := r.b
	dataDir := filepath.Join(b.tmp, "data-console")
	email, pass := "admin@console.example", randomPassword()
	if _, err := b.procs.run(ctx, "admin user create (console)", b.bin, []string{"admin", "--data-dir", dataDir, "user", "create",
		"--email", email, "--role", "admin", "--password-stdin"}, nil, pass+"\n"); err != nil {
		return err
	}
	limit := strconv.Itoa(b.cfg.consoleIdle + 4)
	args := []string{"server", "--listen", "127.0.0.1:0", "--data-dir", dataDir}
	if b.cfg.cpuProfile != "" { // this vmgate's profile beside the main one's
		abs, err := filepath.Abs(b.cfg.cpuProfile + ".console")
		if err != nil {
			return err
		}
		args = append(args, "--cpu-profile", abs)
		b.printf("  CPU profile of the console's vmgate: %s\n", abs)
	}
	p, line, err := b.procs.start(ctx, "vmgate-console", b.bin, args,
		[]string{"VMGATE_CONSOLES_PER_USER=" + limit, "VMGATE_CONSOLES_TOTAL=" + limit}, "")
	if err != nil {
		return err
	}
	base, ok := strings.CutPrefix(line, "vmgate listening on ")
	if !ok {
		return fmt.Errorf("vmgate-console announced %q", line)
	}
	r.vg = &vmgateProc{proc: p, base: base}
	token, err := loginWith(ctx, newClient(nil, nil, false), base, email, pass)
	if err != nil {
		return err
	}
	if r.cid, err = b.registerClusterOn(ctx, base, token, "console", b.small); err != nil {
		return err
	}
	hc := newClient(nil, nil, true)
	hc.Timeout = 0 // the WebSocket's life is the context's
	r.vc = client.New(base, client.WithToken(token), client.WithHTTPClient(hc))
	tokenID, secret, _ := strings.Cut(b.small.token, "=")
	r.pc, err = pve.New(pve.Config{Endpoints: []pve.Endpoint{{URL: b.small.url, Fingerprint: b.small.fingerprint}},
		TokenID: tokenID, TokenSecret: secret})
	return err
}

// viaVmgate opens a console of g through vmgate.
func (r *consoleRun) viaVmgate(ctx context.Context, g client.GuestRef, typ string) (*websocket.Conn, error) {
	t, err := r.vc.OpenConsole(ctx, g, typ)
	if err != nil {
		return nil, err
	}
	c, err := r.vc.DialConsole(ctx, t)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(8 << 20) // a full-screen update may come in one message
	r.opened = append(r.opened, c)
	return c, nil
}

// direct opens a console of g straight at the emulator, logged in as vmgate's
// broker does (termproxy's login line, or VNC authentication with the ticket);
// it answers the bytes that came with the login.
func (r *consoleRun) direct(ctx context.Context, g pve.Guest, vnc bool) (*websocket.Conn, []byte, error) {
	var cp pve.ConsoleProxy
	var err error
	if vnc {
		cp, err = r.pc.VNCProxy(ctx, g)
	} else {
		cp, err = r.pc.TermProxy(ctx, g, "")
	}
	if err != nil {
		return nil, nil, err
	}
	c, err := r.pc.DialConsole(ctx, g, cp)
	if err != nil {
		return nil, nil, err
	}
	c.SetReadLimit(8 << 20)
	r.opened = append(r.opened, c)
	var rest []byte
	if vnc {
		_, rest, err = console.VNCLogin(ctx, c, cp.Ticket)
	} else {
		rest, err = console.TermLogin(ctx, c, cp.User, cp.Ticket)
	}
	return c, rest, err
}

// readUntil reads c's messages until what arrived (after got) holds want.
func readUntil(ctx context.Context, c *websocket.Conn, got []byte, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for !strings.Contains(string(got), want) {
		_, m, err := c.Read(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %q: %w", want, err)
		}
		got = append(got, m...)
	}
	return nil
}

const shellPrompt = ":~# "

// idle opens the idle consoles and judges their RSS and PVE's requests.
func (r *consoleRun) idle(ctx context.Context) error {
	b, n := r.b, r.b.cfg.consoleIdle
	before, err := memKiB(r.vg.proc.pid(), "VmRSS")
	if err != nil {
		return err
	}
	began := time.Now()
	ct := client.CT(r.cid, "pve1", 200)
	conns := make([]*websocket.Conn, 0, n)
	for range n {
		c, err := r.viaVmgate(ctx, ct, client.ConsoleTerm)
		if err != nil {
			return fmt.Errorf("console %d: %w", len(conns)+1, err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns { // every one is relaying: its shell's prompt came through
		if err := readUntil(ctx, c, nil, shellPrompt); err != nil {
			return err
		}
	}
	opened := time.Since(began)
	after, err := memKiB(r.vg.proc.pid(), "VmRSS")
	if err != nil {
		return err
	}
	added := (after - before) << 10
	b.judge("console.idle.rss", added <= consoleIdleBudget, fmt.Sprintf("%+.1f MiB", float64(added)/(1<<20)),
		fmt.Sprintf("%.1f → %.1f MiB, %.0f KiB a console; %d opened in %s", float64(before)/1024, float64(after)/1024,
			float64(added)/1024/float64(n), n, ms(opened)))

	// Idle: the consoles open, nobody typing. The emulator counts every request.
	reqBefore, err := b.emulatorRequests(ctx, b.small)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.cfg.consoleIdleWait):
	}
	reqAfter, err := b.emulatorRequests(ctx, b.small)
	if err != nil {
		return err
	}
	delta, sum := countsDelta(reqBefore, reqAfter)
	b.judge("console.idle.pve", sum == 0, strconv.Itoa(sum), "routes: "+formatCounts(delta))
	b.printf("  idle: %d consoles, RSS %+.1f MiB, %d PVE requests in %s\n", n, float64(added)/(1<<20), sum, b.cfg.consoleIdleWait)
	for _, c := range conns {
		c.Close(websocket.StatusNormalClosure, "")
	}
	return nil
}

// keys types into CT 200's shell on both paths in turn and judges the echoes'
// p50 and p99.
func (r *consoleRun) keys(ctx context.Context) error {
	b := r.b
	d, rest, err := r.direct(ctx, pve.Guest{Kind: pve.LXC, Node: "pve1", VMID: 200}, false)
	if err != nil {
		return fmt.Errorf("direct: %w", err)
	}
	if err := readUntil(ctx, d, rest, shellPrompt); err != nil {
		return err
	}
	v, err := r.viaVmgate(ctx, client.CT(r.cid, "pve1", 200), client.ConsoleTerm)
	if err != nil {
		return fmt.Errorf("through vmgate: %w", err)
	}
	if err := readUntil(ctx, v, nil, shellPrompt); err != nil {
		return err
	}
	paths := []*websocket.Conn{d, v}
	typed := 0
	// typeKeys types n keys on both paths in turn, answering each path's latencies.
	typeKeys := func(n int) (lat [2][]time.Duration, err error) {
		const line = 60
		for i := range n {
			ch := string(rune('a' + i%26))
			for p, c := range paths {
				start := time.Now()
				if err := c.Write(ctx, websocket.MessageText, []byte("0:1:"+ch)); err != nil {
					return lat, err
				}
				if err := readUntil(ctx, c, nil, ch); err != nil {
					return lat, err
				}
				lat[p] = append(lat[p], time.Since(start))
			}
			if typed++; typed == line { // keep the line short: Ctrl-U erases it ("\b \b" a character, no letter)
				for _, c := range paths {
					if err := c.Write(ctx, websocket.MessageText, []byte("0:1:\x15")); err != nil {
						return lat, err
					}
					if err := readUntil(ctx, c, nil, strings.Repeat("\b \b", line)); err != nil {
						return lat, err
					}
				}
				typed = 0
			}
		}
		return lat, nil
	}
	if _, err := typeKeys(20); err != nil { // warm up
		return err
	}
	var added, ratio, dp50s, dp99s, vp50s, vp99s []float64
	for round := range b.cfg.rounds {
		lat, err := typeKeys(b.cfg.consoleKeys)
		if err != nil {
			return err
		}
		dp50, dp99 := percentile(lat[0], 50), percentile(lat[0], 99)
		vp50, vp99 := percentile(lat[1], 50), percentile(lat[1], 99)
		added = append(added, float64(vp50-dp50))
		ratio = append(ratio, float64(vp99)/float64(max(dp99, 1)))
		dp50s, dp99s = append(dp50s, float64(dp50)), append(dp99s, float64(dp99))
		vp50s, vp99s = append(vp50s, float64(vp50)), append(vp99s, float64(vp99))
		b.printf("  round %d, keystroke to echo, %d keys: direct p50 %s p99 %s; through vmgate p50 %s p99 %s\n",
			round+1, b.cfg.consoleKeys, us(dp50), us(dp99), us(vp50), us(vp99))
	}
	b.judge("console.key.p50", median(added) <= float64(time.Millisecond), usf(median(vp50s)),
		fmt.Sprintf("direct %s, added %s (medians of %d rounds)", usf(median(dp50s)), signed(usf(median(added))), b.cfg.rounds))
	b.judge("console.key.p99", median(ratio) <= 1.5, usf(median(vp99s)),
		fmt.Sprintf("direct %s, ratio %.2f (medians of %d rounds)", usf(median(dp99s)), median(ratio), b.cfg.rounds))
	return nil
}

// rfbStream is an RFB client past ServerInit, asking for Raw updates.
type rfbStream struct {
	nc           net.Conn
	w, h, bpp    int
	request, hdr []byte
	rect         []byte
}

// rfbStart sends ClientInit and SetEncodings (Raw) on a console whose handshake
// is done, and reads ServerInit.
func rfbStart(ctx context.Context, c *websocket.Conn, rest []byte) (*rfbStream, error) {
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d unexpected bytes after the handshake", len(rest))
	}
	nc := websocket.NetConn(ctx, c, websocket.MessageBinary)
	if _, err := nc.Write([]byte{1}); err != nil { // ClientInit: shared
		return nil, err
	}
	si := make([]byte, 24)
	if _, err := io.ReadFull(nc, si); err != nil {
		return nil, fmt.Errorf("ServerInit: %w", err)
	}
	nameLen := binary.BigEndian.Uint32(si[20:])
	if nameLen > 1<<10 {
		return nil, fmt.Errorf("ServerInit: a name of %d bytes", nameLen)
	}
	if _, err := io.CopyN(io.Discard, nc, int64(nameLen)); err != nil {
		return nil, err
	}
	s := &rfbStream{nc: nc, w: int(binary.BigEndian.Uint16(si[0:])), h: int(binary.BigEndian.Uint16(si[2:])), bpp: int(si[4]),
		hdr: make([]byte, 4), rect: make([]byte, 12)}
	if s.w == 0 || s.h == 0 || s.bpp%8 != 0 || s.bpp == 0 {
		return nil, fmt.Errorf("ServerInit: %d×%d at %d bpp", s.w, s.h, s.bpp)
	}
	if _, err := nc.Write([]byte{2, 0, 0, 1, 0, 0, 0, 0}); err != nil { // SetEncodings: Raw
		return nil, err
	}
	s.request = []byte{3, 0, 0, 0, 0, 0, byte(s.w >> 8), byte(s.w), byte(s.h >> 8), byte(s.h)} // full, not incremental
	return s, nil
}

// update asks for the whole screen and reads the update; it answers the pixel
// bytes read.
func (s *rfbStream) update() (int64, error) {
	if _, err := s.nc.Write(s.request); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(s.nc, s.hdr); err != nil {
		return 0, err
	}
	if s.hdr[0] != 0 {
		return 0, fmt.Errorf("server message %d, not a framebuffer update", s.hdr[0])
	}
	var n int64
	for range binary.BigEndian.Uint16(s.hdr[2:]) {
		if _, err := io.ReadFull(s.nc, s.rect); err != nil {
			return 0, err
		}
		if enc := int32(binary.BigEndian.Uint32(s.rect[8:])); enc != 0 {
			return 0, fmt.Errorf("rectangle encoding %d, not Raw", enc)
		}
		size := int64(binary.BigEndian.Uint16(s.rect[4:])) * int64(binary.BigEndian.Uint16(s.rect[6:])) * int64(s.bpp/8)
		if _, err := io.CopyN(io.Discard, s.nc, size); err != nil {
			return 0, err
		}
		n += size
	}
	return n, nil
}

// frames streams VM 100's screen on both paths in turn and judges the ratio of
// their throughputs, and states vmgate's CPU time per relayed MiB.
func (r *consoleRun) frames(ctx context.Context) error {
	b := r.b
	d, rest, err := r.direct(ctx, pve.Guest{Kind: pve.Qemu, Node: "pve1", VMID: 100}, true)
	if err != nil {
		return fmt.Errorf("direct: %w", err)
	}
	ds, err := rfbStart(ctx, d, rest)
	if err != nil {
		return fmt.Errorf("direct: %w", err)
	}
	v, err := r.viaVmgate(ctx, client.VM(r.cid, "pve1", 100), client.ConsoleVNC)
	if err != nil {
		return fmt.Errorf("through vmgate: %w", err)
	}
	_, rest, err = console.VNCLogin(ctx, v, "") // vmgate offers security type None
	if err != nil {
		return fmt.Errorf("through vmgate: %w", err)
	}
	vs, err := rfbStart(ctx, v, rest)
	if err != nil {
		return fmt.Errorf("through vmgate: %w", err)
	}
	if ds.w != vs.w || ds.h != vs.h || ds.bpp != vs.bpp {
		return fmt.Errorf("the two paths' screens differ: %d×%d×%d and %d×%d×%d", ds.w, ds.h, ds.bpp, vs.w, vs.h, vs.bpp)
	}
	streams := []*rfbStream{ds, vs}
	for range 2 { // warm up both paths
		for _, s := range streams {
			if _, err := s.update(); err != nil {
				return err
			}
		}
	}
	var ratios, rates0, rates1, perMiBs []float64
	var cpuAll time.Duration
	var mibAll float64
	for round := range b.cfg.rounds {
		var spent [2]time.Duration
		var bytes [2]int64
		cpu0, err := cpuTime(r.vg.proc.pid())
		if err != nil {
			return err
		}
		for range b.cfg.consoleFrames {
			for p, s := range streams {
				if err := ctx.Err(); err != nil {
					return err
				}
				start := time.Now()
				n, err := s.update()
				if err != nil {
					return err
				}
				spent[p] += time.Since(start)
				bytes[p] += n
			}
		}
		cpu1, err := cpuTime(r.vg.proc.pid())
		if err != nil {
			return err
		}
		if bytes[0] != bytes[1] || bytes[0] == 0 {
			return fmt.Errorf("the paths read %d and %d bytes", bytes[0], bytes[1])
		}
		mib := float64(bytes[1]) / (1 << 20)
		rate := func(p int) float64 { return float64(bytes[p]) / (1 << 20) / spent[p].Seconds() }
		cpu := cpu1 - cpu0
		ratios, rates0, rates1 = append(ratios, rate(1)/rate(0)), append(rates0, rate(0)), append(rates1, rate(1))
		perMiBs = append(perMiBs, float64(cpu)/mib)
		cpuAll, mibAll = cpuAll+cpu, mibAll+mib
		b.printf("  round %d, framebuffer, %d updates (%.0f MiB): direct %.0f MiB/s, through vmgate %.0f MiB/s (%.2f ×); vmgate CPU %s/MiB\n",
			round+1, b.cfg.consoleFrames, mib, rate(0), rate(1), rate(1)/rate(0), us(time.Duration(float64(cpu)/mib)))
	}
	b.judge("console.frames", median(ratios) >= 0.9, fmt.Sprintf("%.2f ×", median(ratios)),
		fmt.Sprintf("direct %.0f MiB/s, through vmgate %.0f MiB/s (medians of %d rounds); %d×%d at %d bpp", median(rates0), median(rates1),
			b.cfg.rounds, ds.w, ds.h, ds.bpp))
	state := "below the clock tick: relay more frames"
	if cpuAll > 0 {
		state = fmt.Sprintf("median of %d rounds; %s of CPU for %.0f MiB in all", b.cfg.rounds, ms(cpuAll), mibAll)
	}
	b.judge("console.cpu", cpuAll > 0, usf(median(perMiBs))+"/MiB", state)
	return nil
}
