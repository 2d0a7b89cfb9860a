package notify_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// TestTwoReplicasNeverSendAtOnce: two replicas on one PostgreSQL database send
// the same outbox at the same time, on the real clock. The receiver records
// every message it holds: no event is ever in flight twice at once, each
// arrives, and a target's events arrive in order.
func TestTwoReplicasNeverSendAtOnce(t *testing.T) {
	dsn := storetest.FreshSchema(t)
	t.Parallel()
	open := func() store.Store {
		st, err := store.OpenWith(t.Context(), dsn, store.Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	clock := testkit.NewClock(time.Now()) // not moved: the leases never run out mid-test
	a := newEnvOn(t, open(), clock, "replica-a", nil)
	b := newEnvOn(t, open(), clock, "replica-b", nil)
	rcv := newReceiver(t, "k", clock.Now)
	for _, name := range []string{"one", "two", "three"} {
		a.target(notify.TargetSpec{Name: name, Kind: notify.KindWebhook, Endpoint: rcv.srv.URL + "/" + name, Secret: "k"})
	}
	const events = 60
	a.events(events, notify.EventNodeOffline, notify.SeverityError)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range []*env{a, b} {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := e.sender.Step(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("step: %v", err)
					return
				}
			}
		})
	}
	testkit.Until(t, "every event delivered to the three targets", func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return len(rcv.ids) >= 3*events
	})
	cancel()
	wg.Wait()
	rcv.mu.Lock()
	overlaps, n := rcv.overlaps, len(rcv.ids)
	rcv.mu.Unlock()
	if len(overlaps) > 0 {
		t.Fatalf("events sent by both replicas at once: %v", overlaps)
	}
	if n != 3*events {
		t.Errorf("%d messages for %d deliveries: a lease let one through twice", n, 3*events)
	}
	checkOrderPerPath(t, rcv)
	_, sentA := a.sender.Latencies()
	_, sentB := b.sender.Latencies()
	t.Logf("replica a sent %d, replica b %d", sentA, sentB)
}
