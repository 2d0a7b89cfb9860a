package idempotency

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
)

// t0 is the keepers' clock at the first claim.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// openStore is a fresh SQLite store with one user, whose id it returns.
func openStore(t *testing.T) (store.Store, int64) {
	t.Helper()
	st, err := store.OpenWith(context.Background(), "sqlite::memory:", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u, err := st.CreateUser(context.Background(), store.User{Email: "idem@example.org", PasswordHash: "x", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	return st, u.ID
}

// settler is a Config.Settle whose verdict the test sets, and which remembers
// what it was asked.
type settler struct {
	mu     sync.Mutex
	result Settlement
	asked  []time.Time // the since of every question
}

func (s *settler) settle(_ context.Context, _ Key, since time.Time) (Settlement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, since)
	return s.result, nil
}

func (s *settler) set(r Settlement) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.result = r
}

func (s *settler) questions() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.asked...)
}

// TestKeys: a key is claimed once; a repeat sees the claim (running, then with
// its kept answer); a released key can be claimed again (docs/design.md §3.2).
func TestKeys(t *testing.T) {
	t.Parallel()
	st, user := openStore(t)
	k := New(Config{Store: st})
	t.Cleanup(k.Close)
	ctx := context.Background()
	k1 := Key{UserID: user, Name: "k1"}
	first, err := k.Claim(ctx, k1, "hash-a")
	if err != nil || !first.Claimed {
		t.Fatalf("first claim: %+v (%v)", first, err)
	}
	running, err := k.Claim(ctx, k1, "hash-a")
	if err != nil || running.Claimed || running.Done || running.RequestHash != "hash-a" || running.Since.IsZero() {
		t.Fatalf("claim while running: %+v (%v)", running, err)
	}
	answer := Answer{Status: 202, Headers: map[string]string{"X-Task-Id": "UPID:x"}, Body: []byte(`{"code":202}`)}
	if err := k.Keep(ctx, k1, answer); err != nil {
		t.Fatal(err)
	}
	done, err := k.Claim(ctx, k1, "hash-b")
	if err != nil || done.Claimed || !done.Done || done.RequestHash != "hash-a" || done.Answer.Status != 202 ||
		done.Answer.Headers["X-Task-Id"] != "UPID:x" || string(done.Answer.Body) != `{"code":202}` {
		t.Fatalf("claim after the answer: %+v (%v)", done, err)
	}
	// Keys are per user.
	other, err := st.CreateUser(ctx, store.User{Email: "other@example.org", PasswordHash: "x", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := k.Claim(ctx, Key{UserID: other.ID, Name: "k1"}, "hash-a"); err != nil || !c.Claimed {
		t.Errorf("another user's k1: %+v (%v)", c, err)
	}
	// A key whose request started nothing is released and runs again.
	k2 := Key{UserID: user, Name: "k2"}
	if c, err := k.Claim(ctx, k2, "hash-c"); err != nil || !c.Claimed {
		t.Fatalf("claim k2: %+v (%v)", c, err)
	}
	if err := k.Release(ctx, k2); err != nil {
		t.Fatal(err)
	}
	if c, err := k.Claim(ctx, k2, "hash-d"); err != nil || !c.Claimed {
		t.Errorf("claim of a released key: %+v (%v)", c, err)
	}
}

// TestTakeOverOfADeadHolder (docs/decisions/0020): a process claims a key and
// dies (its keeper closes: no heartbeat). Another process's claim of the same
// request after the lease ran out takes the key over at once and asks Settle
// about the request, naming the first claim's time; what Settle says decides:
// an answer is replayed, nothing started claims the key for the retry, and an
// unsettled key stays in progress, held, until Settle is told again. The dead
// holder's late answer is refused.
func TestTakeOverOfADeadHolder(t *testing.T) {
	t.Parallel()
	kept := Answer{Status: 200, Headers: map[string]string{"X-Task-Id": "UPID:found"}, Body: []byte(`{"data":1}`)}
	for _, c := range []struct {
		name    string
		verdict Settlement
	}{
		{"answered", Settlement{Verdict: Answered, Answer: kept}},
		{"started nothing", Settlement{Verdict: StartedNothing}},
		{"unsettled", Settlement{Verdict: Unsettled}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, user := openStore(t)
			ctx := context.Background()
			key := Key{UserID: user, Name: "retry-me"}
			dead := New(Config{Store: st, Now: func() time.Time { return t0 }, Lease: 30 * time.Second})
			if got, err := dead.Claim(ctx, key, "h"); err != nil || !got.Claimed {
				t.Fatalf("claim: %+v %v", got, err)
			}
			dead.Close()

			// Within the lease the key is still the dead holder's.
			s := &settler{result: c.verdict}
			clk := testkit.NewClock(t0.Add(29 * time.Second))
			alive := New(Config{Store: st, Now: clk.Now, Lease: 30 * time.Second, Settle: s.settle})
			t.Cleanup(alive.Close)
			got, err := alive.Claim(ctx, key, "h")
			if err != nil || got.Claimed || got.Done || len(s.questions()) != 0 {
				t.Fatalf("a retry within the lease: %+v %v, asked %v", got, err, s.questions())
			}

			clk.Set(t0.Add(31 * time.Second))
			got, err = alive.Claim(ctx, key, "h")
			if err != nil {
				t.Fatal(err)
			}
			if q := s.questions(); len(q) != 1 || !q[0].Equal(t0) {
				t.Errorf("Settle asked with since %v, want once with the first claim's %v", q, t0)
			}
			switch c.verdict.Verdict {
			case Answered:
				if !got.Done || got.Answer.Status != 200 || got.Answer.Headers["X-Task-Id"] != "UPID:found" ||
					string(got.Answer.Body) != `{"data":1}` {
					t.Fatalf("the retry: %+v, want the settled answer", got)
				}
			case StartedNothing:
				if !got.Claimed {
					t.Fatalf("the retry: %+v, want the key claimed for it", got)
				}
			case Unsettled:
				if got.Claimed || got.Done {
					t.Fatalf("the retry: %+v, want the key in progress", got)
				}
				// News of the request's outcome settles it.
				s.set(Settlement{Verdict: Answered, Answer: kept})
				alive.Settle(ctx, key)
				if got, err = alive.Claim(ctx, key, "h"); err != nil || !got.Done || got.Answer.Status != 200 {
					t.Fatalf("the retry after the news: %+v %v", got, err)
				}
			}
			if c.verdict.Verdict != StartedNothing {
				if err := dead.Keep(ctx, key, Answer{Status: 500}); errs.KindOf(err) != errs.Conflict {
					t.Errorf("the dead holder's late answer: %v, want Conflict", err)
				}
			}
		})
	}
}

// TestSweepTakesOverWithoutARetry: Run finds a key whose holder's lease ran out
// and settles it; the next claim reads the answer without a take-over of its
// own.
func TestSweepTakesOverWithoutARetry(t *testing.T) {
	t.Parallel()
	st, user := openStore(t)
	ctx := context.Background()
	key := Key{UserID: user, Name: "swept"}
	dead := New(Config{Store: st, Now: func() time.Time { return t0 }})
	if got, err := dead.Claim(ctx, key, "h"); err != nil || !got.Claimed {
		t.Fatalf("claim: %+v %v", got, err)
	}
	dead.Close()
	s := &settler{result: Settlement{Verdict: Answered, Answer: Answer{Status: 202}}}
	alive := New(Config{Store: st, Now: func() time.Time { return t0.Add(time.Minute) }, Settle: s.settle,
		Sweep: time.Millisecond})
	t.Cleanup(alive.Close)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go alive.Run(runCtx)
	testkit.Until(t, "the sweep to settle the key", func() bool { return len(s.questions()) > 0 })
	testkit.Until(t, "the key to hold the answer", func() bool {
		rec, err := st.ExpiredIdempotencyLeases(ctx, t0.Add(time.Hour), 10)
		return err == nil && len(rec) == 0
	})
	got, err := alive.Claim(ctx, key, "h")
	if err != nil || !got.Done || got.Answer.Status != 202 || len(s.questions()) != 1 {
		t.Fatalf("the claim after the sweep: %+v %v (asked %d times)", got, err, len(s.questions()))
	}
}

// TestHeartbeatKeepsTheKey: the holder renews its lease every third of it, so
// another process does not take a key over while its request still runs.
func TestHeartbeatKeepsTheKey(t *testing.T) {
	t.Parallel()
	st, user := openStore(t)
	ctx := context.Background()
	key := Key{UserID: user, Name: "long"}
	clk := testkit.NewClock(t0)
	beat := make(chan time.Time)
	holder := New(Config{Store: st, Now: clk.Now, Lease: 30 * time.Second,
		After: func(d time.Duration) <-chan time.Time {
			if d != 10*time.Second {
				t.Errorf("heartbeat every %v, want a third of the lease", d)
			}
			return beat
		}})
	t.Cleanup(holder.Close)
	if got, err := holder.Claim(ctx, key, "h"); err != nil || !got.Claimed {
		t.Fatalf("claim: %+v %v", got, err)
	}
	clk.Set(t0.Add(20 * time.Second))
	beat <- clk.Now() // the lease now runs until t0+50s
	testkit.Until(t, "the renewed lease", func() bool {
		rec, err := st.ExpiredIdempotencyLeases(ctx, t0.Add(40*time.Second), 10)
		return err == nil && len(rec) == 0
	})
	s := &settler{result: Settlement{Verdict: StartedNothing}}
	other := New(Config{Store: st, Now: func() time.Time { return t0.Add(40 * time.Second) }, Settle: s.settle})
	t.Cleanup(other.Close)
	if got, err := other.Claim(ctx, key, "h"); err != nil || got.Claimed || got.Done || len(s.questions()) != 0 {
		t.Fatalf("another process's claim within the renewed lease: %+v %v (asked %d times)", got, err, len(s.questions()))
	}
	if err := holder.Keep(ctx, key, Answer{Status: 200}); err != nil {
		t.Errorf("the holder's answer: %v", err)
	}
}

// TestNewsWhileSettling: news of a request's outcome (Settle) that comes while
// the key is being settled on an older view is not lost: the keeper asks once
// more when that settling ends unsettled.
func TestNewsWhileSettling(t *testing.T) {
	t.Parallel()
	st, user := openStore(t)
	ctx := context.Background()
	key := Key{UserID: user, Name: "late-news"}
	entered, proceed := make(chan struct{}), make(chan struct{})
	calls := 0
	settle := func(context.Context, Key, time.Time) (Settlement, error) {
		calls++ // only ever one settling at a time: no lock needed, the race detector would tell
		if calls == 1 {
			close(entered)
			<-proceed
			return Settlement{Verdict: Unsettled}, nil
		}
		return Settlement{Verdict: Answered, Answer: Answer{Status: 200}}, nil
	}
	k := New(Config{Store: st, Settle: settle, After: func(time.Duration) <-chan time.Time { return nil }})
	t.Cleanup(k.Close)
	if got, err := k.Claim(ctx, key, "h"); err != nil || !got.Claimed {
		t.Fatalf("claim: %+v %v", got, err)
	}
	awaited := make(chan struct{})
	go func() {
		defer close(awaited)
		k.Await(ctx, key) // the request answered outcome_unknown
	}()
	<-entered
	k.Settle(ctx, key) // the search found the task meanwhile
	close(proceed)
	<-awaited
	if got, err := k.Claim(ctx, key, "h"); err != nil || !got.Done || got.Answer.Status != 200 || calls != 2 {
		t.Fatalf("the retry: %+v %v after %d questions, want the answer after 2", got, err, calls)
	}
}
