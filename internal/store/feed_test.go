package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"

	"github.com/vmgate/vmgate/internal/testkit"
)

// inbox is a subscriber that signals every change it is given.
type inbox struct {
	mu     sync.Mutex
	got    []store.Change
	at     []time.Time
	signal chan struct{}
}

func newInbox() *inbox { return &inbox{signal: make(chan struct{}, 1)} }

func (b *inbox) add(c store.Change) {
	b.mu.Lock()
	b.got = append(b.got, c)
	b.at = append(b.at, time.Now())
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// wait returns when the inbox has a change that match accepts, and when it came;
// it fails t after guard.
func (b *inbox) wait(t testing.TB, what string, match func(store.Change) bool) time.Time {
	t.Helper()
	deadline := time.After(guard)
	for {
		b.mu.Lock()
		i := slices.IndexFunc(b.got, match)
		var when time.Time
		if i >= 0 {
			when = b.at[i]
		}
		b.mu.Unlock()
		if i >= 0 {
			return when
		}
		select {
		case <-b.signal:
		case <-deadline:
			b.mu.Lock()
			defer b.mu.Unlock()
			t.Fatalf("%s: not received after %v; got %+v", what, guard, b.got)
		}
	}
}

// change matches a change of kind with the given fields, whatever its Seq.
func change(kind store.ChangeKind, sessionID string, userID, clusterID int64) func(store.Change) bool {
	return func(c store.Change) bool {
		return c.Kind == kind && c.SessionID == sessionID && c.UserID == userID && c.ClusterID == clusterID
	}
}

func isResync(c store.Change) bool { return c.Kind == store.ChangeResync }

// hourPoll opens a store whose feed is read only when something wakes it: with an
// hour between polls, a change that arrives in a test arrived by NOTIFY.
func hourPoll(t testing.TB, dsn string) store.Store {
	t.Helper()
	s, err := store.OpenWith(t.Context(), dsn, store.Options{PollInterval: time.Hour})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// listenerPID waits until a session LISTENs on the feed channel of dsn's schema and
// returns its backend PID; not is a PID to ignore (one already terminated).
func listenerPID(t testing.TB, dsn string, not int) int {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	admin, err := sql.Open("pgx", postgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var pid int
	testkit.Eventually(t, "a listener on "+schema, func() error {
		err := admin.QueryRowContext(t.Context(), `
			SELECT pid FROM pg_stat_activity
			WHERE query = 'LISTEN "vmgate_changes_' || $1 || '"' AND state = 'idle' AND pid <> $2`, schema, not).Scan(&pid)
		if errors.Is(err, sql.ErrNoRows) {
			return errors.New("nobody listens yet")
		}
		return err
	})
	return pid
}

// TestPostgresNotify: a change made through one store reaches a second store on the
// same schema (another replica: its own pool and listener) by NOTIFY, for every
// kind of change, and a store in another schema hears nothing. It logs the delivery
// latency over 100 changes: from the start of the write on one replica to the
// other's subscriber.
func TestPostgresNotify(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)
	a, b := hourPoll(t, dsn), hourPoll(t, dsn)
	other := hourPoll(t, freshSchema(t))
	got, stranger := newInbox(), newInbox()
	defer b.Subscribe(got.add)()
	defer other.Subscribe(stranger.add)()
	listenerPID(t, dsn, 0)
	ctx := context.Background()

	u, err := a.CreateUser(ctx, store.User{Email: "notify@example.com", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	got.wait(t, "user created", change(store.ChangeUser, "", u.ID, 0))
	c, err := a.CreateCluster(ctx, store.Cluster{Name: "notify", Endpoints: []store.Endpoint{{URL: "https://n:8006"}}})
	if err != nil {
		t.Fatal(err)
	}
	got.wait(t, "cluster created", change(store.ChangeCluster, "", 0, c.ID))
	if _, err := a.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c.ID, Role: store.GrantViewer}); err != nil {
		t.Fatal(err)
	}
	got.wait(t, "grant", change(store.ChangeGrant, "", u.ID, c.ID))
	if err := a.CreateSession(ctx, store.Session{ID: "n1", UserID: u.ID, Generation: 1, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := a.RevokeSession(ctx, "n1", time.Now(), "logout"); err != nil {
		t.Fatal(err)
	}
	got.wait(t, "logout", change(store.ChangeSession, "n1", 0, 0))
	if err := a.DeleteCluster(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	got.wait(t, "cluster deleted", change(store.ChangeCluster, "", 0, c.ID))

	const trials = 100
	lat := notifyLatencies(t, a, got, u, trials)
	slices.Sort(lat)
	t.Logf("NOTIFY delivery between two stores, %d changes, from the start of the write: p50 %v, p99 %v, max %v",
		trials, lat[trials/2], lat[trials*99/100], lat[trials-1])

	stranger.mu.Lock()
	defer stranger.mu.Unlock()
	if len(stranger.got) != 0 {
		t.Fatalf("a store in another schema received %+v", stranger.got)
	}
}

// notifyLatencies updates u through a n times and returns, for each, the time from
// the start of the write to got's receipt of its change.
func notifyLatencies(t testing.TB, a store.Store, got *inbox, u store.User, n int) []time.Duration {
	// a's own subscriber has the change, with its Seq, when the write returns.
	var (
		mu   sync.Mutex
		last int64
	)
	defer a.Subscribe(func(c store.Change) {
		mu.Lock()
		last = max(last, c.Seq)
		mu.Unlock()
	})()
	lat := make([]time.Duration, n)
	for i := range n {
		u.Nickname = fmt.Sprint("n", i)
		start := time.Now()
		if _, err := a.UpdateUser(context.Background(), u); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		want := last
		mu.Unlock()
		lat[i] = got.wait(t, "update "+u.Nickname, func(c store.Change) bool { return c.Seq == want }).Sub(start)
	}
	return lat
}

// BenchmarkPostgresNotify measures a change's way from a write on one store to the
// subscriber of another (write included), with the poll an hour away.
func BenchmarkPostgresNotify(b *testing.B) {
	dsn := freshSchema(b)
	a, other := hourPoll(b, dsn), hourPoll(b, dsn)
	got := newInbox()
	defer other.Subscribe(got.add)()
	listenerPID(b, dsn, 0)
	u, err := a.CreateUser(context.Background(), store.User{Email: "bench@example.com", Role: store.RoleUser})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	lat := notifyLatencies(b, a, got, u, b.N)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// TestPostgresListenerReconnect: when the listener's connection is killed, the feed
// reconnects, tells its subscribers to resync (notifications sent meanwhile are
// lost), and rereads the feed: a change made while nobody listened still arrives,
// though the poll is an hour away.
func TestPostgresListenerReconnect(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)
	a, b := hourPoll(t, dsn), hourPoll(t, dsn)
	got := newInbox()
	defer b.Subscribe(got.add)()
	pid := listenerPID(t, dsn, 0)

	admin, err := sql.Open("pgx", postgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var killed bool
	if err := admin.QueryRowContext(t.Context(), `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener %d: %v %v", pid, killed, err)
	}
	// Written while the listener is down or reconnecting: its NOTIFY may reach
	// nobody.
	u, err := a.CreateUser(context.Background(), store.User{Email: "missed@example.com", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	got.wait(t, "resync after the reconnect", isResync)
	got.wait(t, "the change made meanwhile", change(store.ChangeUser, "", u.ID, 0))
	if again := listenerPID(t, dsn, pid); again == pid {
		t.Fatalf("the listener did not reconnect")
	}
}

// TestPostgresListenerBlackHole: a listener whose connection goes silent (a
// partition: nothing closes, nothing answers) finds out by pinging, reconnects once
// the network heals, resyncs, and rereads the feed: a change made meanwhile arrives
// though the poll is an hour away.
//
// The test follows the listener by its log, not by the proxy's connection count
// (the store's pool connects through the proxy too, whenever a read needs a
// connection) nor by pg_stat_activity (after its first ping the listener's last
// query is no longer its LISTEN).
func TestPostgresListenerBlackHole(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)
	a := hourPoll(t, dsn)
	p, viaDSN := startProxy(t, dsn)
	events := newLogRecorder()
	// Pings every 50 ms; the timeout bounds each ping, connect and feed read, and
	// is long enough that a busy machine does not make them fail when the network
	// is well.
	b, err := store.OpenWith(t.Context(), viaDSN, store.WithListenerQuiet(
		store.Options{PollInterval: time.Hour, Timeout: 2 * time.Second, Logger: slog.New(events)}, 50*time.Millisecond))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer b.Close()
	got := newInbox()
	defer b.Subscribe(got.add)()
	events.wait(t, "change feed: listening", 1)

	p.BlackHole()
	// A loss logged from now on leaves the listener without a working connection
	// until Heal: any connection it opens now is black-holed too. (One logged
	// before, from a ping a busy machine made too slow, was followed by a
	// reconnect, maybe before the black hole: it does not count.)
	lost := events.count("change feed: listener lost")
	events.wait(t, "change feed: listener lost", lost+1)
	u, err := a.CreateUser(context.Background(), store.User{Email: "partitioned@example.com", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	p.Heal()
	got.wait(t, "resync after the partition", isResync)
	got.wait(t, "the change made during the partition", change(store.ChangeUser, "", u.ID, 0))
}

// logRecorder is a slog.Handler that counts the messages logged and signals each.
type logRecorder struct {
	mu     sync.Mutex
	msgs   map[string]int
	signal chan struct{}
}

func newLogRecorder() *logRecorder {
	return &logRecorder{msgs: map[string]int{}, signal: make(chan struct{}, 1)}
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs[rec.Message]++
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
	return nil
}

// count says how many times a message starting with prefix was logged.
func (r *logRecorder) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for msg, c := range r.msgs {
		if strings.HasPrefix(msg, prefix) {
			n += c
		}
	}
	return n
}

// wait returns once a message starting with prefix has been logged n times; it
// fails t after guard.
func (r *logRecorder) wait(t testing.TB, prefix string, n int) {
	t.Helper()
	deadline := time.After(guard)
	for r.count(prefix) < n {
		select {
		case <-r.signal:
		case <-deadline:
			t.Fatalf("%q logged %d times after %v, want %d", prefix, r.count(prefix), guard, n)
		}
	}
}

// TestSQLiteFeedAcrossProcesses: on SQLite a change made by another process (an
// admin command on the same file) arrives by the poll.
func TestSQLiteFeedAcrossProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "vmgate.db")
	open := func() store.Store {
		s, err := store.OpenWith(t.Context(), path, store.Options{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	got := newInbox()
	defer b.Subscribe(got.add)()
	u, err := a.CreateUser(context.Background(), store.User{Email: "admin-cmd@example.com", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	got.wait(t, "a user created by another process", change(store.ChangeUser, "", u.ID, 0))
}
