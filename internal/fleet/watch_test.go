package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/testkit"
)

// manualAfter is a watcher clock a test moves: each wait is parked until the
// test releases it, after moving the injected clock by what was asked.
type manualAfter struct {
	clock *fakeClock
	mu    sync.Mutex
	waits []manualWait
}

type manualWait struct {
	d  time.Duration
	ch chan time.Time
}

func (m *manualAfter) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	m.mu.Lock()
	m.waits = append(m.waits, manualWait{d, ch})
	m.mu.Unlock()
	return ch
}

func (m *manualAfter) parked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waits)
}

// release moves the clock by the first parked wait and ends it.
func (m *manualAfter) release() {
	m.mu.Lock()
	w := m.waits[0]
	m.waits = m.waits[1:]
	m.mu.Unlock()
	m.clock.Advance(w.d)
	w.ch <- m.clock.Now()
}

// 500 subscribers of one cluster cost one /cluster/resources read per
// snapshot age: the watcher's (issue 19 item 1, docs/decisions/0089). A change
// made on the emulator reaches every subscriber as a Changed tick at the next
// read, and the watcher ends with its last subscriber.
func TestWatchersShareOneReadPerSnapshotAge(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	after := &manualAfter{clock: clock}
	s, svc, c := registeredSim(t, 0, func(cfg *Config) { cfg.Now = clock.Now; cfg.WatchAfter = after.After })
	reads := func() int { return s.c.Requests("GET", "/cluster/resources") }
	r0 := reads()

	const pages = 500
	subs := make([]<-chan Tick, pages)
	stops := make([]func(), pages)
	for i := range pages {
		subs[i], stops[i] = svc.Watch(c.ID)
	}
	first := func(ch <-chan Tick) Tick {
		select {
		case t := <-ch:
			return t
		case <-time.After(10 * time.Second):
			return Tick{}
		}
	}
	for i, ch := range subs {
		if tk := first(ch); tk.Seq == 0 || !tk.Changed || tk.Err != nil {
			t.Fatalf("subscriber %d: first tick %+v, want a changed one without error", i, tk)
		}
	}
	if svc.Watched() != 1 {
		t.Fatalf("%d watchers for one cluster", svc.Watched())
	}
	testkit.Until(t, "the watcher waiting for the snapshot to age", func() bool { return after.parked() == 1 })

	// Five more rounds, nothing changed: one read each, no Changed.
	for round := range 5 {
		after.release()
		for i, ch := range subs {
			if tk := first(ch); tk.Changed || tk.Err != nil {
				t.Fatalf("round %d, subscriber %d: %+v, want an unchanged tick", round, i, tk)
			}
		}
		testkit.Until(t, "the watcher parked again", func() bool { return after.parked() == 1 })
	}
	if got := reads() - r0; got != 6 {
		t.Fatalf("%d subscribers over 6 snapshot ages read /cluster/resources %d times, want 6", pages, got)
	}
	// Meanwhile a page's own list read is answered from the watcher's snapshot.
	if _, err := svc.GuestList(context.Background(), testReader, c.ID, "lxc", VMQuery{}); err != nil {
		t.Fatal(err)
	}
	if got := reads() - r0; got != 6 {
		t.Fatalf("a list read beside the watcher read PVE again (%d reads)", got)
	}

	// A change made straight on the emulator is a Changed tick at the next read.
	if err := s.c.SetLock(101, "backup"); err != nil {
		t.Fatal(err)
	}
	after.release()
	for i, ch := range subs {
		if tk := first(ch); !tk.Changed {
			t.Fatalf("subscriber %d did not hear the lock set on the emulator: %+v", i, tk)
		}
	}
	l, err := svc.VMList(context.Background(), testReader, c.ID, VMQuery{Q: "101"})
	if err != nil || len(l.VMs) != 1 || l.VMs[0].Lock != "backup" {
		t.Fatalf("VM 101 after the change: %+v, %v", l.VMs, err)
	}

	for _, stop := range stops {
		stop()
	}
	testkit.Until(t, "the watcher parked again", func() bool { return after.parked() == 1 })
	after.release()
	testkit.Until(t, "the watcher ending with its last subscriber", func() bool { return svc.Watched() == 0 })
}
