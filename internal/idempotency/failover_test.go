package idempotency

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
)

// awayStore is a store whose heartbeats fail as the real one's do while the
// database is away (a PostgreSQL failover): store_unavailable.
type awayStore struct {
	Store
	away  atomic.Bool
	tried atomic.Int32 // heartbeats tried while away
}

func (s *awayStore) HeartbeatIdempotencyKey(ctx context.Context, userID int64, key, owner string, until time.Time) error {
	if s.away.Load() {
		s.tried.Add(1)
		return &errs.Error{Kind: errs.Unavailable, Reason: errs.ReasonStoreUnavailable, RetryAfter: 2}
	}
	return s.Store.HeartbeatIdempotencyKey(ctx, userID, key, owner, until)
}

// TestHeartbeatRetriesWhileTheStoreIsAway (docs/decisions/0118): a renewal that
// fails because the store is away is tried again after store.LeaseRetry, not a
// third of the lease later, so the lease is renewed as soon as the store is
// back; then the holder renews every third of the lease again, and keeps the key.
func TestHeartbeatRetriesWhileTheStoreIsAway(t *testing.T) {
	t.Parallel()
	db, user := openStore(t)
	st := &awayStore{Store: db}
	ctx := context.Background()
	key := Key{UserID: user, Name: "failover"}
	clk := testkit.NewClock(t0)
	waits := make(chan time.Duration, 1)
	beat := make(chan time.Time)
	holder := New(Config{Store: st, Now: clk.Now, Lease: 30 * time.Second,
		After: func(d time.Duration) <-chan time.Time { waits <- d; return beat }})
	t.Cleanup(holder.Close)
	if got, err := holder.Claim(ctx, key, "h"); err != nil || !got.Claimed {
		t.Fatalf("claim: %+v %v", got, err)
	}
	next := func(want time.Duration, what string) {
		t.Helper()
		if d := <-waits; d != want {
			t.Fatalf("%s: the holder waits %v, want %v", what, d, want)
		}
	}
	next(10*time.Second, "the first renewal")
	st.away.Store(true)
	clk.Set(t0.Add(10 * time.Second))
	beat <- clk.Now()
	next(store.LeaseRetry, "after a renewal failed")
	clk.Set(t0.Add(11 * time.Second))
	beat <- clk.Now()
	next(store.LeaseRetry, "after a second one failed")
	if n := st.tried.Load(); n != 2 {
		t.Fatalf("%d renewals tried while the store was away, want 2", n)
	}
	st.away.Store(false)
	clk.Set(t0.Add(12 * time.Second))
	beat <- clk.Now() // the lease now runs until t0+42s
	next(10*time.Second, "once the store is back")
	rec, err := db.ExpiredIdempotencyLeases(ctx, t0.Add(41*time.Second), 10)
	if err != nil || len(rec) != 0 {
		t.Fatalf("the lease after the store came back: expired %+v %v", rec, err)
	}
	if err := holder.Keep(ctx, key, Answer{Status: 200}); err != nil {
		t.Errorf("the holder's answer: %v", err)
	}
}
