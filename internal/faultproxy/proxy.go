package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Direction is the way bytes travel through the proxy.
type Direction uint8

const (
	// ToUpstream is the client's bytes going to the upstream (requests).
	ToUpstream Direction = 1 << iota
	// ToClient is the upstream's bytes going back to the client (answers).
	ToClient
	// BothWays is both directions.
	BothWays = ToUpstream | ToClient
)

func (d Direction) String() string {
	switch d {
	case ToUpstream:
		return "to upstream"
	case ToClient:
		return "to client"
	case BothWays:
		return "both ways"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// Clock is the time source of latency faults.
type Clock interface {
	Now() time.Time
	// After delivers once d has passed on this clock.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Options configure a Proxy. The zero value is usable.
type Options struct {
	// Listen is the proxy's address [127.0.0.1:0, a free loopback port].
	Listen string
	// Clock drives Latency [real time].
	Clock Clock
	// DialTimeout bounds a dial to the upstream [5s].
	DialTimeout time.Duration
	// CloseTimeout bounds how long Close waits for the proxy's goroutines [5s].
	CloseTimeout time.Duration
	// OnRequest, when set, is called with the request's number (1, 2, ... over
	// the proxy's life) each time a request (see "Requests and answers") is about
	// to be checked against the faults, before any of it is forwarded. A fault it
	// switches on therefore applies to that very request and its answer: a test
	// can fault the n-th request exactly, e.g. a write that follows a read, with
	// no race. It runs on a connection's goroutine and must not block.
	OnRequest func(n int64)
}

// Stats counts what a proxy did since New.
type Stats struct {
	Accepted        int64 // client connections accepted
	Open            int64 // client connections open now
	Dials           int64 // upstream connections made
	DialErrors      int64 // upstream dials that failed (the client's connection is then closed)
	BytesToUpstream int64 // bytes forwarded to the upstream
	BytesToClient   int64 // bytes forwarded to clients
	Resets          int64 // client connections reset by a fault (ResetBeforeForwarding, ResetAfterForwarding, ResetAll)
	Cuts            int64 // connections closed by CutAfter
	Requests        int64 // requests seen (see "Requests and answers")
}

// counted is a fault that strikes a limited number of times (0: unlimited).
type counted struct {
	on   bool
	left int
}

func (c *counted) set(times int) { c.on, c.left = true, times }

// take consumes one strike; it reports false when the fault is off.
func (c *counted) take() bool {
	if !c.on {
		return false
	}
	if c.left > 0 {
		c.left--
		if c.left == 0 {
			c.on = false
		}
	}
	return true
}

type cutFault struct {
	counted
	n   int64
	gen uint64 // tells a connection that a new cut started counting
}

// faults is the switchable state; Proxy.mu guards it.
type faults struct {
	latency     [2]time.Duration
	hold        [2]bool
	blackHole   bool
	resetBefore counted
	resetAfter  counted
	cut         [2]cutFault
	gen         uint64
}

// Proxy is a fault-injecting TCP proxy. Its methods are safe for concurrent use.
type Proxy struct {
	upstream string
	ln       net.Listener
	clock    Clock
	dialTO   time.Duration
	closeTO  time.Duration
	onReq    func(int64)

	mu      sync.Mutex
	f       faults
	changed chan struct{} // closed and replaced at every change of f
	conns   map[*conn]bool
	closed  bool

	done    chan struct{}
	wg      sync.WaitGroup
	waiting atomic.Int64

	accepted, open, dials, dialErrors, bytesUp, bytesDown, resets, cuts, requests atomic.Int64
}

// New starts a proxy that forwards every connection it accepts to upstream
// (host:port).
func New(upstream string, opts Options) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("faultproxy: upstream %q: %w", upstream, err)
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = 5 * time.Second
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{
		upstream: upstream,
		ln:       ln,
		clock:    opts.Clock,
		dialTO:   opts.DialTimeout,
		closeTO:  opts.CloseTimeout,
		onReq:    opts.OnRequest,
		changed:  make(chan struct{}),
		conns:    map[*conn]bool{},
		done:     make(chan struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted: p.accepted.Load(), Open: p.open.Load(), Dials: p.dials.Load(), DialErrors: p.dialErrors.Load(),
		BytesToUpstream: p.bytesUp.Load(), BytesToClient: p.bytesDown.Load(), Resets: p.resets.Load(), Cuts: p.cuts.Load(),
		Requests: p.requests.Load(),
	}
}

// Waiting is the number of chunks now held back by a gate (Hold, BlackHole)
// or a latency.
func (p *Proxy) Waiting() int { return int(p.waiting.Load()) }

// change applies fn to the faults and wakes every waiter to re-check them.
func (p *Proxy) change(fn func(f *faults)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(&p.f)
	p.f.gen++
	close(p.changed)
	p.changed = make(chan struct{})
}

func dirs(d Direction) []int {
	var out []int
	if d&ToUpstream != 0 {
		out = append(out, 0)
	}
	if d&ToClient != 0 {
		out = append(out, 1)
	}
	return out
}

// Latency delays every chunk in dir by d from its arrival at the proxy; 0
// removes the latency.
func (p *Proxy) Latency(dir Direction, d time.Duration) {
	p.change(func(f *faults) {
		for _, i := range dirs(dir) {
			f.latency[i] = max(d, 0)
		}
	})
}

// Hold stops forwarding in dir until Release or Heal.
func (p *Proxy) Hold(dir Direction) {
	p.change(func(f *faults) {
		for _, i := range dirs(dir) {
			f.hold[i] = true
		}
	})
}

// Release lets held chunks in dir go on (a black hole stays until Heal).
func (p *Proxy) Release(dir Direction) {
	p.change(func(f *faults) {
		for _, i := range dirs(dir) {
			f.hold[i] = false
		}
	})
}

// BlackHole accepts connections and bytes and forwards nothing, answers
// nothing and closes nothing, until Heal.
func (p *Proxy) BlackHole() {
	p.change(func(f *faults) { f.blackHole = true })
}

// ResetBeforeForwarding resets the client's connection instead of
// forwarding its next request, the next times times (0: until Heal).
func (p *Proxy) ResetBeforeForwarding(times int) {
	p.change(func(f *faults) { f.resetBefore.set(max(times, 0)) })
}

// ResetAfterForwarding forwards the next request and resets the client's
// connection when the answer begins, the next times times (0: until Heal).
func (p *Proxy) ResetAfterForwarding(times int) {
	p.change(func(f *faults) { f.resetAfter.set(max(times, 0)) })
}

// CutAfter closes a connection after n more bytes in dir, the next times
// times (0: until Heal). Each connection counts its own n from the moment
// it first forwards bytes in dir under this fault.
func (p *Proxy) CutAfter(dir Direction, n int64, times int) {
	p.change(func(f *faults) {
		for _, i := range dirs(dir) {
			f.cut[i].set(max(times, 0))
			f.cut[i].n = max(n, 0)
			f.cut[i].gen = f.gen + 1
		}
	})
}

// Heal clears every fault: the proxy is transparent again and held chunks
// go on.
func (p *Proxy) Heal() {
	p.change(func(f *faults) { *f = faults{gen: f.gen} })
}

// ResetAll resets every open client connection now.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	list := p.connsLocked()
	p.mu.Unlock()
	for _, c := range list {
		c.abort(endReset)
	}
}

// connsLocked lists the open connections; p.mu must be held.
func (p *Proxy) connsLocked() []*conn {
	list := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		list = append(list, c)
	}
	return list
}

// Close stops the proxy: the listener and every connection are closed,
// every waiter is woken, and Close waits (at most Options.CloseTimeout) for
// every goroutine to return.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	list := p.connsLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range list {
		c.abort(endClose)
	}
	stopped := make(chan struct{})
	go func() { p.wg.Wait(); close(stopped) }()
	t := time.NewTimer(p.closeTO)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		return fmt.Errorf("faultproxy: goroutines still running %s after Close", p.closeTO)
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := &conn{p: p, client: nc, ctx: ctx, cancel: cancel, dead: make(chan struct{}), upReady: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			cancel()
			nc.Close()
			return
		}
		p.conns[c] = true
		eager := !p.f.blackHole && !p.f.hold[0] && !p.f.resetBefore.on
		p.mu.Unlock()
		p.accepted.Add(1)
		p.open.Add(1)
		c.start(eager)
	}
}

// chunk is bytes read from one side, with the time they arrived.
type chunk struct {
	b   []byte
	at  time.Time
	eof bool // the side closed its writing half
}

// conn is one proxied connection.
type conn struct {
	p      *Proxy
	client net.Conn
	ctx    context.Context // ends with the connection (bounds the dial)
	cancel context.CancelFunc

	mu       sync.Mutex
	upstream net.Conn // nil until dialled
	dialOnce sync.Once
	upReady  chan struct{} // closed once the dial is done (upstream set, or dead)
	dead     chan struct{} // closed when the connection is torn down
	isDead   bool
	halves   int // directions finished by EOF

	resetOnAnswer atomic.Bool
	requested     bool // a request was forwarded (c.mu)
	tls           tlsTrack
	cutGen        [2]uint64
	cutLeft       [2]int64
}

func (c *conn) start(eager bool) {
	up := make(chan chunk, 16)
	down := make(chan chunk, 16)
	c.p.wg.Add(3)
	go c.read(c.client, up, 0)
	go c.write(up, 0)
	go func() {
		defer c.p.wg.Done()
		if eager {
			c.dial()
		}
		select {
		case <-c.upReady:
		case <-c.dead:
			return
		}
		c.mu.Lock()
		u := c.upstream
		c.mu.Unlock()
		if u == nil {
			return
		}
		c.p.wg.Add(2)
		go c.read(u, down, 1)
		go c.write(down, 1)
	}()
}

// dial connects the upstream once; on failure the client is closed.
func (c *conn) dial() bool {
	c.dialOnce.Do(func() {
		d := net.Dialer{Timeout: c.p.dialTO}
		u, err := d.DialContext(c.ctx, "tcp", c.p.upstream)
		c.mu.Lock()
		if err == nil && !c.isDead {
			c.upstream = u
			c.p.dials.Add(1)
		} else if err == nil {
			u.Close()
		}
		c.mu.Unlock()
		close(c.upReady)
		if err != nil {
			c.p.dialErrors.Add(1)
			c.abort(endClose)
		}
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.upstream != nil && !c.isDead
}

// read copies one side's bytes into chunks until EOF or an error.
func (c *conn) read(src net.Conn, out chan<- chunk, dir int) {
	defer c.p.wg.Done()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case out <- chunk{b: buf[:n], at: c.p.clock.Now()}:
			case <-c.dead:
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				select {
				case out <- chunk{eof: true}:
				case <-c.dead:
				}
			} else {
				c.abort(endClose)
			}
			return
		}
	}
}

// write forwards chunks in direction dir (0: to the upstream, 1: to the
// client), applying the faults.
func (c *conn) write(in <-chan chunk, dir int) {
	defer c.p.wg.Done()
	for {
		var ch chunk
		select {
		case ch = <-in:
		case <-c.dead:
			return
		}
		if !c.forward(ch, dir) {
			return
		}
	}
}

// forward applies the faults to one chunk and sends it on. It reports
// false when the connection is finished.
func (c *conn) forward(ch chunk, dir int) bool {
	p := c.p
	var request, answer bool // what the chunk carries (see classify)
	if !ch.eof {
		request, answer = c.classify(ch.b, dir)
	}
	if request {
		n := p.requests.Add(1)
		if p.onReq != nil {
			p.onReq(n)
		}
	}
	for {
		p.mu.Lock()
		f := &p.f
		changed := p.changed
		if request && f.resetBefore.on && f.resetBefore.take() {
			p.mu.Unlock()
			c.abort(endReset)
			return false
		}
		held := f.hold[dir] || f.blackHole
		var wait <-chan time.Time
		if !held && f.latency[dir] > 0 && !ch.at.IsZero() {
			if left := ch.at.Add(f.latency[dir]).Sub(p.clock.Now()); left > 0 {
				wait = p.clock.After(left)
			}
		}
		p.mu.Unlock()
		if !held && wait == nil {
			break
		}
		p.waiting.Add(1)
		passed := false
		select {
		case <-changed:
		case <-wait:
			passed = true
		case <-c.dead:
		case <-p.done:
		}
		p.waiting.Add(-1)
		if c.gone() {
			return false
		}
		if passed {
			ch.at = time.Time{} // this chunk has served its latency
		}
	}

	if dir == 0 && ch.eof {
		c.mu.Lock()
		dialled := c.upstream != nil
		c.mu.Unlock()
		if !dialled {
			c.abort(endClose) // nothing was ever sent: no need to reach the upstream
			return false
		}
	}
	var dst net.Conn
	if dir == 0 {
		if !c.dial() {
			return false
		}
		c.mu.Lock()
		dst = c.upstream
		c.mu.Unlock()
	} else {
		dst = c.client
	}
	if ch.eof {
		return c.halfClose(dst)
	}
	if dir == 1 && c.resetOnAnswer.Load() {
		c.abort(endReset)
		return false
	}

	b, cut := ch.b, false
	p.mu.Lock()
	if cf := &p.f.cut[dir]; cf.on && (request || answer) {
		if c.cutGen[dir] != cf.gen {
			c.cutGen[dir], c.cutLeft[dir] = cf.gen, cf.n
		}
		if int64(len(b)) >= c.cutLeft[dir] {
			cf.take()
			b, cut = b[:c.cutLeft[dir]], true
		} else {
			c.cutLeft[dir] -= int64(len(b))
		}
	}
	if request && !c.resetOnAnswer.Load() && p.f.resetAfter.on && p.f.resetAfter.take() {
		// Set before the write: the answer may come back before Write returns.
		c.resetOnAnswer.Store(true)
	}
	p.mu.Unlock()

	if len(b) > 0 {
		// Counted before the write, so that whoever sees the bytes sees them
		// counted; what a failed write did not send is taken back.
		counter := &p.bytesUp
		if dir == 1 {
			counter = &p.bytesDown
		}
		counter.Add(int64(len(b)))
		n, err := dst.Write(b)
		if err != nil {
			counter.Add(int64(n - len(b)))
			c.abort(endClose)
			return false
		}
	}
	if cut {
		c.abort(endCut)
		return false
	}
	return true
}

// classify says whether a chunk to the upstream carries (part of) a
// request, and whether a chunk to the client carries (part of) an answer
// to one. Without TLS every chunk to the upstream is a request. A
// connection whose first byte is a TLS handshake record (0x16) is followed
// record by record, so that the handshake does not count: a request is an
// application-data record (0x17) from the client, except the client's
// Finished in TLS 1.3 (the first such record when the server sent
// application data before the client did, which TLS 1.2 never does). An
// answer is anything the upstream sends after a request.
func (c *conn) classify(b []byte, dir int) (request, answer bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &c.tls
	if dir == 0 && t.mode == 0 {
		t.mode = modePlain
		if len(b) > 0 && b[0] == 0x16 {
			t.mode = modeTLS
		}
	}
	if dir == 1 {
		if t.mode == modeTLS {
			for _, typ := range t.scan(1, b) {
				if typ == 0x17 && t.clientApp == 0 {
					t.serverAppFirst = true
				}
			}
		}
		return false, c.requested
	}
	if t.mode == modePlain {
		c.requested = true
		return true, false
	}
	for _, typ := range t.scan(0, b) {
		if typ != 0x17 {
			continue
		}
		t.clientApp++
		if t.clientApp == 1 && t.serverAppFirst {
			continue // TLS 1.3: the client's Finished
		}
		request = true
	}
	if request {
		c.requested = true
	}
	return request, false
}

const (
	modePlain = 1
	modeTLS   = 2
)

// tlsTrack follows TLS record boundaries in both directions.
type tlsTrack struct {
	mode           int
	hdr            [2][5]byte
	hdrN           [2]int
	left           [2]int // bytes left of the current record's body
	clientApp      int    // application-data records from the client
	serverAppFirst bool
}

// scan returns the types of the records that start in b.
func (t *tlsTrack) scan(dir int, b []byte) []byte {
	var types []byte
	for len(b) > 0 {
		if t.left[dir] > 0 {
			n := min(t.left[dir], len(b))
			t.left[dir] -= n
			b = b[n:]
			continue
		}
		n := copy(t.hdr[dir][t.hdrN[dir]:], b)
		t.hdrN[dir] += n
		b = b[n:]
		if t.hdrN[dir] < 5 {
			break
		}
		h := t.hdr[dir]
		types = append(types, h[0])
		t.left[dir] = int(h[3])<<8 | int(h[4])
		t.hdrN[dir] = 0
	}
	return types
}

// halfClose passes an EOF on; when both directions have ended the
// connection is torn down.
func (c *conn) halfClose(dst net.Conn) bool {
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.mu.Lock()
	c.halves++
	both := c.halves == 2
	c.mu.Unlock()
	if both {
		c.abort(endClose)
	}
	return false
}

func (c *conn) gone() bool {
	select {
	case <-c.dead:
		return true
	case <-c.p.done:
		return true
	default:
		return false
	}
}

// How a connection ends.
const (
	endClose = iota // both sides closed
	endReset        // the client's side reset (RST), counted in Stats.Resets
	endCut          // closed by CutAfter, counted in Stats.Cuts
)

// abort tears the connection down. The counters move before the sockets
// close, so a client that sees the end also sees it counted. It reports
// whether this call did it.
func (c *conn) abort(how int) bool {
	c.mu.Lock()
	if c.isDead {
		c.mu.Unlock()
		return false
	}
	c.isDead = true
	close(c.dead)
	c.cancel()
	u := c.upstream
	c.mu.Unlock()
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
	c.p.open.Add(-1)
	switch how {
	case endReset:
		c.p.resets.Add(1)
		if tc, ok := c.client.(*net.TCPConn); ok {
			tc.SetLinger(0) // close sends RST
		}
	case endCut:
		c.p.cuts.Add(1)
	}
	c.client.Close()
	if u != nil {
		u.Close()
	}
	return true
}
