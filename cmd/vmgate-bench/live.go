package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The live pages' bound (issue 19 item 1, docs/decisions/0089): 500 open pages
// watching one cluster cost at most one PVE inventory read per 2 s, because one
// watcher per cluster reads the inventory when its snapshot ages out and every
// page is rendered from that read.
//
// The streams are the web UI's own (GET /live?page=…, with a session cookie of
// the log-in form), held by as many viewers and sessions as the stream caps
// require (docs/decisions/0039: 8 a session, 32 a user), each session from a
// loopback address of its own, as browsers in an office would be, so that
// neither the caps nor the connection cap per client network is raised for the
// bench.

// Stream caps of `vmgate server`'s defaults (--max-streams-per-session,
// --max-streams-per-user).
const (
	liveStreamsPerSession = 8
	liveSessionsPerUser   = 32 / liveStreamsPerSession
)

// liveSnapshotAge is the inventory snapshot's age (fleet.SnapshotMaxAge): the
// bound allows one read per this span.
const liveSnapshotAge = 2 * time.Second

// liveStream is one open live page.
type liveStream struct {
	page    string
	regions atomic.Int64 // "regions" events received
	ended   atomic.Bool
	err     atomic.Value // the error that ended it early, a string
}

// measureLive: -live-streams open live pages of the dev cluster (its fleet, its
// guest list and guest pages, in turn) for -live-duration per round, counting
// the requests the emulator receives, /cluster/resources (the inventory) above
// all, and vmgate's CPU meanwhile.
func (b *bench) measureLive(ctx context.Context) error {
	n := b.cfg.liveStreams
	sessions := (n + liveStreamsPerSession - 1) / liveStreamsPerSession
	users := (sessions + liveSessionsPerUser - 1) / liveSessionsPerUser
	b.printf("%d live pages of the dev cluster (GET /live?page=…: the fleet, the guest list, guest pages, in turn),\n"+
		"held by %d viewers in %d web sessions (the stream caps: %d a session, %d a user), each session from its own\n"+
		"loopback address; %d rounds of %v counting the emulator's requests\n",
		n, users, sessions, liveStreamsPerSession, liveStreamsPerSession*liveSessionsPerUser, b.cfg.rounds, b.cfg.liveDuration)

	addrs := &sourceAddrs{octet: 79}
	var clients []*http.Client
	for u := range users {
		email, pass := fmt.Sprintf("live-%d@bench.example", u+1), randomPassword()
		if err := b.viewer(ctx, email, pass); err != nil {
			return err
		}
		for s := 0; s < liveSessionsPerUser && len(clients) < sessions; s++ {
			c, err := webLogin(ctx, b.vg.base, addrs.get(), email, pass)
			if err != nil {
				return err
			}
			clients = append(clients, c)
		}
	}

	pages := []string{"/", fmt.Sprintf("/vms?cluster=%d", b.smallID)}
	for _, g := range []struct {
		node string
		vmid int
	}{{"pve1", 100}, {"pve1", 101}, {"pve2", 102}, {"pve2", 103}, {"pve3", 104}, {"pve3", 105}} {
		pages = append(pages, fmt.Sprintf("/vms/%d/%s/%d", b.smallID, g.node, g.vmid))
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	streams := make([]*liveStream, n)
	for i := range streams {
		s := &liveStream{page: pages[i%len(pages)]}
		streams[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.follow(sctx, clients[i/liveStreamsPerSession], b.vg.base)
		}()
	}
	// Every stream has its first render (or has ended) before any window.
	began := time.Now()
	if err := pollUntil(ctx, time.Minute, 50*time.Millisecond, func() bool {
		for _, s := range streams {
			if s.regions.Load() == 0 && !s.ended.Load() {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("the %d live pages did not all open: %w", n, err)
	}
	if failed := endedStreams(streams); len(failed) > 0 {
		return fmt.Errorf("%d of %d live pages were refused or ended: %s", len(failed), n, failed[0])
	}
	b.printf("  %d live pages open in %s\n", n, ms(time.Since(began)))

	var perSnapshot, cpuShare []float64
	var rounds []string
	met := true
	var worst string
	for r := range b.cfg.rounds {
		before, err := b.emulatorRequests(ctx, b.small)
		if err != nil {
			return err
		}
		cpu0, err := cpuTime(b.vg.proc.pid())
		if err != nil {
			return err
		}
		events0 := totalRegions(streams)
		t0 := time.Now()
		if err := sleepCtx(ctx, b.cfg.liveDuration); err != nil {
			return err
		}
		elapsed := time.Since(t0)
		cpu1, err := cpuTime(b.vg.proc.pid())
		if err != nil {
			return err
		}
		after, err := b.emulatorRequests(ctx, b.small)
		if err != nil {
			return err
		}
		delta, _ := countsDelta(before, after)
		reads := delta["GET /cluster/resources"]
		// One read per 2 s: a window of W holds at most ⌊W / 2 s⌋ + 1 reads
		// (one may fall on each edge of the window).
		spans := float64(elapsed) / float64(liveSnapshotAge)
		allowed := int(spans) + 1
		met = met && reads <= allowed
		perSnapshot = append(perSnapshot, float64(reads)/spans)
		cpuShare = append(cpuShare, float64(cpu1-cpu0)/float64(elapsed))
		rounds = append(rounds, fmt.Sprintf("%d in %.1f s (≤ %d)", reads, elapsed.Seconds(), allowed))
		b.printf("  round %d  %.1f s: %d inventory reads, %.2f per 2 s (at most %d allowed: one per 2 s, and one on the window's edge);\n"+
			"           vmgate CPU %.1f%% of a core; %d renders sent to the pages; PVE: %s\n",
			r+1, elapsed.Seconds(), reads, float64(reads)/spans, allowed, 100*float64(cpu1-cpu0)/float64(elapsed),
			totalRegions(streams)-events0, formatCounts(delta))
		if failed := endedStreams(streams); len(failed) > 0 {
			worst = fmt.Sprintf("%d live pages ended during the rounds: %s", len(failed), failed[0])
			b.printf("  %s\n", worst)
		}
	}
	rss, _ := memKiB(b.vg.proc.pid(), "VmRSS")
	value := fmt.Sprintf("%.2f per 2 s", median(perSnapshot))
	detail := fmt.Sprintf("%d live pages; inventory reads per round %s; vmgate CPU %.1f%% of a core (median), RSS %.1f MiB",
		n, strings.Join(rounds, ", "), 100*median(cpuShare), float64(rss)/1024)
	if worst != "" {
		detail += "; " + worst
	}
	b.judge("live.reads", met && worst == "", value, detail)
	return nil
}

// viewer creates a user with the viewer grant on the dev cluster only.
func (b *bench) viewer(ctx context.Context, email, pass string) error {
	body := fmt.Sprintf(`{"email":%q,"nickname":"Live viewer","password":%q,"role":"user"}`, email, pass)
	var user struct {
		Data struct{ ID int64 } `json:"data"`
	}
	if err := b.admin(ctx, "POST", "/api/v1/users", body, &user); err != nil {
		return fmt.Errorf("create %s: %w", email, err)
	}
	if err := b.admin(ctx, "PUT", fmt.Sprintf("/api/v1/clusters/%d/grants/%d", b.smallID, user.Data.ID), `{"role":"viewer"}`, nil); err != nil {
		return fmt.Errorf("grant %s: %w", email, err)
	}
	return nil
}

// loginCSRF finds the log-in form's token.
var loginCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// webLogin logs in through the web UI's form from ip, as a browser does, and
// returns a client that holds the session's cookie and dials from ip.
func webLogin(ctx context.Context, base string, ip net.IP, email, pass string) (*http.Client, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	c := newClient(nil, dialFrom(func() net.IP { return ip }), true)
	c.Jar = jar
	c.Timeout = 0 // the streams stay open; a request's context ends it
	form, err := webRequest(ctx, c, "GET", base+"/login", nil)
	if err != nil {
		return nil, fmt.Errorf("the log-in form: %w", err)
	}
	m := loginCSRF.FindSubmatch(form)
	if m == nil {
		return nil, fmt.Errorf("the log-in form has no csrf field: %.200s", form)
	}
	vals := url.Values{"email": {email}, "password": {pass}, "csrf": {html.UnescapeString(string(m[1]))}, "next": {"/"}}
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/login", strings.NewReader(vals.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base) // as a browser sends it with a form's POST
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("log in as %s: %w", email, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("log in as %s: %s", email, resp.Status)
	}
	return c, nil
}

// webRequest reads a page whole.
func webRequest(ctx context.Context, c *http.Client, method, u string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %.200s", resp.Status, raw)
	}
	return raw, err
}

// follow holds the page's stream open until ctx ends, counting its renders.
func (s *liveStream) follow(ctx context.Context, c *http.Client, base string) {
	defer s.ended.Store(true)
	fail := func(err error) {
		if ctx.Err() == nil {
			s.err.Store(fmt.Sprintf("%s: %v", s.page, err))
		}
	}
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/live?page="+url.QueryEscape(s.page), nil)
	if err != nil {
		fail(err)
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		fail(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		fail(fmt.Errorf("%s %s", resp.Status, raw))
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "event: regions":
			s.regions.Add(1)
		case strings.HasPrefix(line, "event: ") && line != "event: ping":
			fail(errors.New("the stream said " + strings.TrimPrefix(line, "event: ")))
			return
		}
	}
	if err := sc.Err(); err != nil {
		fail(err)
		return
	}
	fail(errors.New("the stream ended"))
}

// endedStreams says why the streams that ended did.
func endedStreams(streams []*liveStream) []string {
	var out []string
	for _, s := range streams {
		if s.ended.Load() {
			why, _ := s.err.Load().(string)
			if why == "" {
				why = s.page + ": ended"
			}
			out = append(out, why)
		}
	}
	return out
}

// totalRegions is the renders every stream received.
func totalRegions(streams []*liveStream) int64 {
	var n int64
	for _, s := range streams {
		n += s.regions.Load()
	}
	return n
}
