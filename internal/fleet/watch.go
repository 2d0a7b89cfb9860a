package fleet

import (
	"context"
	"slices"
	"sync"
	"time"
)

// A live page (the web UI's fleet, guest list, a guest's page, the task list)
// shows a cluster's inventory as it changes. However many pages are open, a
// cluster is watched by one goroutine of this process: it keeps the cluster's
// guest snapshot fresh (one /cluster/resources read per SnapshotMaxAge, shared
// with every other reader through the snapshot, snapshot.go) and tells each
// subscriber after every read, saying whether the inventory changed. 500 open
// pages on one cluster therefore cost PVE what one costs: one inventory read per
// SnapshotMaxAge (issue 19, docs/decisions/0089). The watcher stops once its
// last subscriber leaves.

// Tick is what a watcher tells its subscribers after each read of the
// cluster's inventory.
type Tick struct {
	// Seq counts the watcher's reads; a subscriber may see gaps (it was busy).
	Seq uint64
	// Changed is set when a guest's state differs from the previous read's:
	// a guest came or went, or its status, node, lock, HA state, name or tags
	// changed (or this is the first read, or the read's error changed). The
	// figures that move by themselves (CPU, memory, uptime) are no change.
	Changed bool
	// AsOf is when the snapshot was read (zero after a failed read).
	AsOf time.Time
	// Err is the read's error; the subscriber's own reads would meet it too.
	Err error
}

// watcher is one cluster's watching goroutine and its subscribers.
type watcher struct {
	subs map[chan Tick]bool // guarded by watchers.mu
	last Tick               // the latest tick, handed to a new subscriber at once
}

// watchers are the process's watchers by cluster.
type watchers struct {
	mu   sync.Mutex
	byID map[int64]*watcher
}

// Watch subscribes to a cluster's inventory: the channel receives a Tick after
// each read of the cluster's guests (about every SnapshotMaxAge), at once the
// latest one if the cluster is being watched already. A subscriber that has not
// taken the previous tick gets the newest only (the channel holds one); a
// missed Changed is carried over, so no change goes unsaid. stop ends the
// subscription (the channel is not closed: select on your own context too). The
// caller has authorized the cluster.
func (s *Service) Watch(clusterID int64) (ticks <-chan Tick, stop func()) {
	ch := make(chan Tick, 1)
	s.watch.mu.Lock()
	if s.watch.byID == nil {
		s.watch.byID = map[int64]*watcher{}
	}
	w := s.watch.byID[clusterID]
	if w == nil {
		w = &watcher{subs: map[chan Tick]bool{}}
		s.watch.byID[clusterID] = w
		go s.runWatcher(clusterID, w)
	} else if w.last.Seq > 0 {
		t := w.last
		t.Changed = true // new to this subscriber
		ch <- t
	}
	w.subs[ch] = true
	s.watch.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.watch.mu.Lock()
			delete(w.subs, ch)
			s.watch.mu.Unlock()
		})
	}
}

// Watched says how many clusters have a watcher now (for tests and metrics).
func (s *Service) Watched() int {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return len(s.watch.byID)
}

// runWatcher reads the cluster's guests whenever the snapshot has aged out, and
// tells the subscribers, until none is left.
func (s *Service) runWatcher(clusterID int64, w *watcher) {
	var (
		seq     uint64
		prev    *snapshot[guestSet]
		prevErr string
	)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), watchReadTimeout)
		sn, err := s.guests(ctx, clusterID)
		cancel()
		seq++
		t := Tick{Seq: seq, Err: err}
		next := SnapshotMaxAge
		if err == nil {
			t.AsOf = sn.at
			t.Changed = prev == nil || (sn != prev && !sameState(sn.val, prev.val))
			prev = sn
			// Wake when the snapshot ages out: the read then is the only one
			// (a page's own read meanwhile would share it, snapshot.go).
			next = max(sn.at.Add(SnapshotMaxAge).Sub(s.now()), watchMinPause)
		}
		errText := ""
		if err != nil {
			errText = err.Error()
		}
		t.Changed = t.Changed || errText != prevErr
		prevErr = errText
		if !s.broadcast(clusterID, w, t) {
			return
		}
		select {
		case <-s.watchAfter(next):
		case <-s.watchStop:
			return
		}
	}
}

// watchReadTimeout bounds one read of the watcher.
const watchReadTimeout = 10 * time.Second

// watchMinPause spaces a watcher's reads when the clock says the snapshot is
// already old (a read that took long, a clock moved by a test).
const watchMinPause = 100 * time.Millisecond

// broadcast hands t to every subscriber, or removes the watcher when there is
// none left (false: the watcher ends).
func (s *Service) broadcast(clusterID int64, w *watcher, t Tick) bool {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	if len(w.subs) == 0 {
		delete(s.watch.byID, clusterID)
		return false
	}
	w.last = t
	for ch := range w.subs {
		select {
		case old := <-ch: // not taken yet: replace it, keeping its news
			t := t
			t.Changed = t.Changed || old.Changed
			ch <- t
		default:
			ch <- t
		}
	}
	return true
}

// sameState says whether two reads show the same guests in the same state,
// the moving figures aside.
func sameState(a, b guestSet) bool {
	return sameGuests(a.all, b.all)
}

func sameGuests(a, b []VMView) bool {
	return slices.EqualFunc(a, b, func(x, y VMView) bool {
		return x.VMID == y.VMID && x.Type == y.Type && x.Status == y.Status && x.Node == y.Node && x.Lock == y.Lock &&
			x.HAState == y.HAState && x.Name == y.Name && slices.Equal(x.Tags, y.Tags)
	})
}
