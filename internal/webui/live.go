package webui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/frontend"
	"github.com/vmgate/vmgate/internal/sse"
)

// Every page is live (issue 19 item 1, docs/decisions/0089): the fleet, the
// guest list, a guest's page, the task list and the audit page. Such a page
// names its stream in <main data-live>; the script opens it (no polling from
// the browser) and the stream sends the page's live regions again, as HTML
// the page's own template renders, each time one of them changed.
//
// The stream renders the page the way the page's own handler does — it calls
// the handler, into a buffer, with the request's principal — so a live page
// shows exactly what a reload would, and is refused exactly as a reload would
// be (a grant taken away, the guest gone: the page reloads and says so). It
// renders after each read of the inventory by the clusters' watchers
// (fleet.Watch): one watcher per cluster however many pages are open, so 500
// pages watching a cluster cost PVE one inventory read per snapshot age. The
// only other PVE read a page makes, a guest's status, is shared by every page
// of that guest and made again only when the inventory says the guest's state
// changed (liveStatus).
//
// A region is an element with an id and the attribute data-region, whose last
// child is its end mark, <i data-end="ID" hidden></i> (<tr …></tr> in a
// table's body): what lies between is the region's HTML. html/template escapes every '<' of a value, so no value can
// forge a mark.

// liveRoute is a page the live stream renders: its pattern (a GET of the route
// table) and who may see it.
type liveRoute struct {
	pattern string
	access  access
	handle  func(w http.ResponseWriter, r *http.Request) error
}

// livePatterns are the pages that are live.
func livePatterns() map[string]bool {
	m := map[string]bool{"/{$}": true, "/vms": true, "/tasks": true, "/admin/audit": true}
	for _, k := range guestKinds {
		m[k.route()] = true
	}
	return m
}

// liveMux routes a page's address to its handler for the stream, so that the
// page's path values are read as the page's request reads them.
func (u *UI) buildLive(rs []route) {
	patterns := livePatterns()
	u.liveMux = http.NewServeMux()
	for _, rt := range rs {
		if rt.method != http.MethodGet || !patterns[rt.pattern] {
			continue
		}
		lr := liveRoute{pattern: rt.pattern, access: rt.access, handle: rt.handle}
		u.liveMux.Handle("GET "+rt.pattern, lr)
	}
}

// ServeHTTP runs the page's handler for the live stream: the error goes back to
// the stream through the recorder.
func (lr liveRoute) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := w.(*pageRecorder)
	rec.route = lr
	if lr.access == admin {
		if u := rec.ui; u != nil {
			if err := u.accounts.RequireAdmin(r.Context(), principal(r), "UI live "+lr.pattern); err != nil {
				rec.err = err
				return
			}
		}
	}
	rec.err = lr.handle(w, r)
}

// liveURL is the address of the live stream of the page r asks for, or "" when
// the page is not live.
func (u *UI) liveURL(r *http.Request) string {
	if u.liveMux == nil || r.Method != http.MethodGet {
		return ""
	}
	if _, pattern := u.liveMux.Handler(r); pattern == "" {
		return ""
	}
	return "/live?page=" + url.QueryEscape(r.URL.RequestURI())
}

// pageRecorder is the ResponseWriter a page renders into for the stream.
type pageRecorder struct {
	ui     *UI
	header http.Header
	status int
	body   bytes.Buffer
	route  liveRoute
	err    error
}

func (p *pageRecorder) Header() http.Header { return p.header }
func (p *pageRecorder) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return p.body.Write(b)
}
func (p *pageRecorder) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}

// liveRegions are a page's live regions by id, as HTML.
type liveRegions map[string]string

// regionsOf cuts the live regions out of a page.
func regionsOf(page []byte) liveRegions {
	out := liveRegions{}
	const open = `" data-region>`
	for rest := page; ; {
		i := bytes.Index(rest, []byte(open))
		if i < 0 {
			return out
		}
		j := bytes.LastIndex(rest[:i], []byte(`id="`))
		if j < 0 {
			return out
		}
		id := string(rest[j+len(`id="`) : i])
		rest = rest[i+len(open):]
		// The end mark is an empty element: <i data-end="ID" hidden></i>, or
		// <tr …></tr> in a table's body.
		mark := []byte(`data-end="` + id + `" hidden></`)
		k := bytes.Index(rest, mark)
		if k < 0 || strings.ContainsAny(id, `"<> `) {
			return out
		}
		e := bytes.IndexByte(rest[k+len(mark):], '>')
		if e < 0 {
			return out
		}
		end := k + len(mark) + e + 1
		out[id] = string(rest[:end])
		rest = rest[end:]
	}
}

// maxLiveClusters bounds the watchers one stream subscribes to.
const maxLiveClusters = 32

// liveEvents is the stream of a live page (GET /live?page=ADDRESS): a
// "regions" event with every region at once, then one with the regions that
// changed after each read of the inventory; "reload" when the page can no
// longer be shown as it is (refused, gone, moved: a reload says why, or goes
// where the guest went), "session" when the session ended, and a retry hint
// when vmgate shuts down. It takes one of the caller's stream slots
// (docs/security.md item 34), as the task and operation streams do.
func (u *UI) liveEvents(w http.ResponseWriter, r *http.Request) error {
	page := r.URL.Query().Get("page")
	target, err := url.Parse(page)
	if err != nil || !strings.HasPrefix(page, "/") || strings.HasPrefix(page, "//") || target.Host != "" || len(page) > 2000 {
		return errs.E(errs.NotFound, "there is no live page at this address")
	}
	pr := r.Clone(r.Context())
	pr.URL = &url.URL{Path: target.Path, RawPath: target.RawPath, RawQuery: target.RawQuery}
	pr.RequestURI = pr.URL.RequestURI()
	pr.Method = http.MethodGet
	pr.Header = r.Header.Clone()
	pr.Header.Del("Accept")
	if _, pattern := u.liveMux.Handler(pr); pattern == "" {
		return errs.E(errs.NotFound, "there is no live page at this address")
	}
	// The page as it is now: refused here, the stream is refused as the page is.
	first, err := u.renderLive(pr)
	if err != nil {
		return err
	}
	ids, err := u.liveClusters(r)
	if err != nil {
		return err
	}

	p := principal(r)
	release, err := u.streams.Acquire(p.UserID, p.AuditSession())
	if err != nil {
		return err
	}
	defer release()
	raw := sessionToken(r)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sessionEnded := false
	sessionOK := func() bool {
		if _, err := u.sessions.Authenticate(ctx, raw); errs.KindOf(err) == errs.Unauthenticated {
			sessionEnded = true
			cancel()
			return false
		}
		return true
	}
	ticks := make(chan struct{}, 1)
	for _, id := range ids {
		ch, stop := u.fleet.Watch(id)
		defer stop()
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-ch:
					select {
					case ticks <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	// A page of no cluster (the audit page, a fleet of none) is rendered at
	// the watchers' pace all the same.
	var every <-chan time.Time
	if len(ids) == 0 {
		t := time.NewTicker(fleet.SnapshotMaxAge)
		defer t.Stop()
		every = t.C
	}

	stream := sse.Start(ctx, w, ssePing, sessionOK)
	defer stream.Close()
	sent := liveRegions{}
	send := func(now liveRegions) error {
		diff := liveRegions{}
		for id, html := range now {
			if sent[id] != html {
				diff[id] = html
				sent[id] = html
			}
		}
		if len(diff) == 0 {
			return nil
		}
		b, err := json.Marshal(diff)
		if err != nil {
			return err
		}
		return stream.Event("regions", string(b))
	}
	if err := send(first); err != nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			if sessionEnded {
				_ = stream.Event("session", "{}")
			}
			return nil
		case <-u.draining():
			_ = stream.Retry("shutdown", shutdownRetry, "{}")
			return nil
		case <-ticks:
		case <-every:
		}
		if !sessionOK() {
			_ = stream.Event("session", "{}")
			return nil
		}
		now, err := u.renderLive(pr)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			_ = stream.Event("reload", "{}")
			return nil
		}
		if err := send(now); err != nil {
			return nil
		}
	}
}

// errLiveMoved is a page that answers with a redirect (the guest moved).
var errLiveMoved = errors.New("the page moved")

// renderLive renders the page pr asks for and cuts out its regions. A page
// that fails, or answers anything but its page, is an error.
func (u *UI) renderLive(pr *http.Request) (liveRegions, error) {
	ctx, cancel := context.WithTimeout(withLive(pr.Context()), clusterRead+2*time.Second)
	defer cancel()
	rec := &pageRecorder{ui: u, header: http.Header{}}
	u.liveMux.ServeHTTP(rec, pr.WithContext(ctx))
	switch {
	case rec.err != nil:
		return nil, rec.err
	case rec.status != http.StatusOK:
		return nil, errLiveMoved
	}
	return regionsOf(rec.body.Bytes()), nil
}

// liveClusters are the clusters whose watchers a stream follows: those the
// caller may see.
func (u *UI) liveClusters(r *http.Request) ([]int64, error) {
	cs, err := u.fleet.Clusters(r.Context(), actor(r))
	if err != nil {
		return nil, err
	}
	ids := make([]int64, 0, min(len(cs), maxLiveClusters))
	for _, c := range cs {
		if len(ids) == maxLiveClusters {
			break
		}
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// draining is closed when vmgate shuts down (the VMs service drains).
func (u *UI) draining() <-chan struct{} {
	if d, ok := u.vms.(interface{ Draining() <-chan struct{} }); ok {
		return d.Draining()
	}
	return nil
}

// liveKey marks a context as a live render's.
type liveKey struct{}

func withLive(ctx context.Context) context.Context { return context.WithValue(ctx, liveKey{}, true) }

func isLive(ctx context.Context) bool { b, _ := ctx.Value(liveKey{}).(bool); return b }

// liveStatus shares a guest's status among the live renders of its pages: a
// render takes the status read last, with the moving figures (CPU, memory,
// uptime) from the inventory snapshot, as long as the snapshot shows the guest
// on the same node in the same state (status, lock, HA state, name); else, or
// when it is older than liveStatusMaxAge, one read serves every page of the
// guest rendering then.
//
// A guest's page that shows a task ended (?task=, inline.go) says "VM 101
// started." beside the state: that state must have been read after the task
// was seen ended, or the page would say "started" beside "stopped" until the
// snapshot catches up. So the first render that sees a task ended takes a
// ticket (done), and a status whose read began before it is read again, once
// for every page of the guest. Tickets count, so no clock decides.
type liveStatus struct {
	reads  singleflight.Group
	mu     sync.Mutex
	known  map[liveGuest]liveStatusEntry
	done   map[string]uint64 // a task's UPID: the ticket of the render that first saw it ended
	ticket uint64            // the last ticket taken (a status read's start, a task seen ended)
}

type liveGuest struct {
	cluster    int64
	kind, node string
	vmid       int64
}

type liveStatusEntry struct {
	st    fleet.VMStatusView
	state string // the snapshot's state of the guest when st was read
	at    time.Time
	began uint64 // the ticket of the read's start
}

// liveStatusMaxAge bounds how long a status is reused while the snapshot shows
// no change (what the snapshot does not carry, a VM's QMP status, may change
// unseen that long).
const liveStatusMaxAge = 30 * time.Second

// maxLiveStatuses bounds the statuses kept; past it the cache starts over.
const maxLiveStatuses = 10000

// liveFleet is the UI's Fleet with the guest status of a live render shared
// (liveStatus); every other call, and every call outside a live render, is
// the fleet's own.
type liveFleet struct {
	frontend.Fleet
	status *liveStatus
	now    func() time.Time
}

func (f liveFleet) GuestStatus(ctx context.Context, a fleet.Actor, clusterID int64, kind, node string, vmid int64) (fleet.VMStatusView, error) {
	if !isLive(ctx) {
		return f.Fleet.GuestStatus(ctx, a, clusterID, kind, node, vmid)
	}
	g := liveGuest{clusterID, kind, node, vmid}
	// The caller's grant is checked by this read of the snapshot, which every
	// render makes; the shared status is read with the first caller's.
	state, row, ok, err := f.snapshotState(ctx, a, g)
	if err != nil {
		return fleet.VMStatusView{}, err
	}
	ls := f.status
	ls.mu.Lock()
	e, have := ls.known[g]
	ls.mu.Unlock()
	ended := ls.endedTicket(ctx)
	if ok && have && e.state == state && f.now().Sub(e.at) < liveStatusMaxAge && e.began > ended {
		st := e.st
		st.CPU, st.Mem, st.Uptime = row.CPU, row.Mem, row.Uptime
		return st, nil
	}
	key := liveKeyOf(g)
	if ended != 0 {
		key += "#" + strconv.FormatUint(ended, 10) // no read begun before the task was seen ended
	}
	v, err, _ := ls.reads.Do(key, func() (any, error) {
		ls.mu.Lock()
		ls.ticket++
		began := ls.ticket
		ls.mu.Unlock()
		st, err := f.Fleet.GuestStatus(context.WithoutCancel(ctx), a, clusterID, kind, node, vmid)
		if err != nil {
			return nil, err
		}
		ls.mu.Lock()
		if len(ls.known) >= maxLiveStatuses {
			clear(ls.known)
		}
		if e, have := ls.known[g]; !have || e.began < began {
			ls.known[g] = liveStatusEntry{st: st, state: state, at: f.now(), began: began}
		}
		ls.mu.Unlock()
		return st, nil
	})
	if err != nil {
		return fleet.VMStatusView{}, err
	}
	return v.(fleet.VMStatusView), nil
}

// taskEndedKey marks a render of a guest's page that shows a task ended.
type taskEndedKey struct{}

// withTaskEnded says that the page rendering shows the task upid ended: the
// guest's status it shows must be read after that was first seen.
func withTaskEnded(ctx context.Context, upid string) context.Context {
	return context.WithValue(ctx, taskEndedKey{}, upid)
}

// endedTicket is the ticket of the moment a render first saw ended the task
// the render of ctx shows (a status read begun before it is too old to show
// beside it), or 0.
func (ls *liveStatus) endedTicket(ctx context.Context) uint64 {
	upid, _ := ctx.Value(taskEndedKey{}).(string)
	if upid == "" {
		return 0
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	seen, ok := ls.done[upid]
	if !ok {
		if len(ls.done) >= maxLiveStatuses {
			clear(ls.done)
		}
		ls.ticket++
		seen = ls.ticket
		ls.done[upid] = seen
	}
	return seen
}

func liveKeyOf(g liveGuest) string {
	return itoa(g.cluster) + "/" + g.kind + "/" + g.node + "/" + itoa(g.vmid)
}

// snapshotState is the guest's state as the inventory snapshot shows it, and
// its row; ok is false when the snapshot does not show it on the node.
func (f liveFleet) snapshotState(ctx context.Context, a fleet.Actor, g liveGuest) (string, fleet.VMView, bool, error) {
	l, err := f.Fleet.GuestList(ctx, a, g.cluster, g.kind, fleet.VMQuery{Q: itoa(g.vmid)})
	if err != nil {
		if k := errs.KindOf(err); k == errs.NotFound || k == errs.Forbidden {
			return "", fleet.VMView{}, false, err // refused: as the page's own read would be
		}
		return "", fleet.VMView{}, false, nil
	}
	for _, v := range l.VMs {
		if v.VMID == g.vmid && v.Node == g.node {
			return v.Status + "|" + v.Lock + "|" + v.HAState + "|" + v.Name, v, true, nil
		}
	}
	return "", fleet.VMView{}, false, nil
}
