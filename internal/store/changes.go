package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPollInterval is Options.PollInterval's default.
const DefaultPollInterval = time.Second

// feedStaleAfter is how long the feed may stay unreadable before its subscribers
// are told to resync once it reads again: far below the day Prune keeps, so no
// change can have been pruned unseen, yet long enough that a blip of the network
// does not make every replica reload everything.
const feedStaleAfter = time.Minute

// appendChanges appends cs to the change feed inside tx, sets their Seq and returns
// them. The table lock makes sequence values commit in the order they were taken
// (on PostgreSQL; SQLite's writers are serial anyway): without it a poller that has
// read seq 11 could miss a seq 10 committed a moment later. On PostgreSQL the
// transaction also notifies the schema's channel, so the listeners of every replica
// hear of the change when it commits, not before. The payload is only the newest
// Seq: a listener reads the feed from its own position anyway, and the payload
// stays far below NOTIFY's 8000 bytes however many entries a transaction adds.
func (s *sqlStore) appendChanges(ctx context.Context, tx *sql.Tx, at time.Time, cs ...Change) ([]Change, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	if err := s.lock(ctx, tx, "changes"); err != nil {
		return nil, err
	}
	changed := s.t(s.stamp(at))
	for i := range cs {
		c := &cs[i]
		if err := tx.QueryRowContext(ctx, `
			INSERT INTO changes (kind, session_id, user_id, cluster_id, changed_at) VALUES ($1, $2, $3, $4, $5)
			RETURNING seq`,
			string(c.Kind), c.SessionID, c.UserID, c.ClusterID, changed).Scan(&c.Seq); err != nil {
			return nil, fmt.Errorf("feed %s change: %w", c.Kind, err)
		}
	}
	if s.channel != "" {
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, s.channel, strconv.FormatInt(cs[len(cs)-1].Seq, 10)); err != nil {
			return nil, fmt.Errorf("notify %s: %w", s.channel, err)
		}
	}
	return cs, nil
}

// inFeedTx runs fn in a write transaction like inTx; the changes fn fed (through
// appendChanges) go to this process's subscribers once the transaction committed,
// before inFeedTx returns.
func (s *sqlStore) inFeedTx(ctx context.Context, fn func(tx *sql.Tx) ([]Change, error)) error {
	var fed []Change
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		fed, err = fn(tx)
		return err
	})
	if err == nil {
		s.feed.publish(fed)
	}
	return err
}

// Changes implements Store.
func (s *sqlStore) Changes(ctx context.Context, after int64, limit int) ([]Change, error) {
	return queryAll(ctx, s.rdb, "read the change feed", func(sc scanner) (Change, error) {
		var (
			c    Change
			kind string
		)
		err := sc.Scan(&c.Seq, &kind, &c.SessionID, &c.UserID, &c.ClusterID)
		c.Kind = ChangeKind(kind)
		return c, err
	}, `SELECT seq, kind, session_id, user_id, cluster_id FROM changes WHERE seq > $1 ORDER BY seq LIMIT $2`,
		after, clampLimit(limit, 1000, 10000))
}

// feedHead returns the newest Seq of the feed, 0 when it is empty.
func (s *sqlStore) feedHead(ctx context.Context) (int64, error) {
	var head int64
	if err := s.rdb.QueryRowContext(ctx, `SELECT COALESCE(max(seq), 0) FROM changes`).Scan(&head); err != nil {
		return 0, fmt.Errorf("read the head of the change feed: %w", err)
	}
	return head, nil
}

// Subscribe implements Store.
func (s *sqlStore) Subscribe(fn func(Change)) func() { return s.feed.subscribe(fn) }

// changeFeed hands the change feed to subscribers. Three paths lead there:
//
//   - publish: a write of this process, synchronously after its commit, so this
//     process never serves what it has just changed from a stale cache;
//   - a reader goroutine, woken by listen (PostgreSQL's NOTIFY, from any replica)
//     or every poll interval, reads the feed from its position on and hands every
//     entry over in order; the poll is what still works when the listener is lost,
//     and on SQLite what carries the writes of other processes (admin commands);
//   - ChangeResync, when the reader cannot vouch for having seen every change.
//
// It starts with the first subscriber and stops with the store.
type changeFeed struct {
	s    *sqlStore
	poll time.Duration
	log  *slog.Logger
	// listen, when set, follows the engine's push until ctx ends: it calls wake
	// when the feed may have grown, and resync after it had to reconnect.
	listen func(ctx context.Context, wake, resync func())

	startOnce sync.Once
	wakeC     chan struct{} // buffered: one pending wake-up is enough
	// resyncDue asks the reader to deliver ChangeResync before its next read.
	resyncDue atomic.Bool

	mu      sync.Mutex
	subs    map[int]func(Change)
	nextSub int
	closed  bool
	cancel  context.CancelFunc
	running sync.WaitGroup
}

func newChangeFeed(s *sqlStore, o Options) *changeFeed {
	return &changeFeed{s: s, poll: o.PollInterval, log: o.Logger, wakeC: make(chan struct{}, 1), subs: map[int]func(Change){}}
}

// subscribe registers fn. The first subscriber positions the feed at its head and
// starts the reader (and listener); later ones wait until it is positioned, so none
// misses a change committed after it subscribed.
func (f *changeFeed) subscribe(fn func(Change)) func() {
	if f == nil {
		return func() {}
	}
	f.mu.Lock()
	id := f.nextSub
	f.nextSub++
	f.subs[id] = fn
	f.mu.Unlock()
	f.startOnce.Do(f.start)
	return func() {
		f.mu.Lock()
		delete(f.subs, id)
		f.mu.Unlock()
	}
}

// start positions the feed at its head and starts the reader and the listener. When
// the head cannot be read, the reader positions itself later and then resyncs its
// subscribers: they may have missed what committed in between. It holds no lock
// while it reads, so writers keep publishing meanwhile.
func (f *changeFeed) start() {
	ctx, cancel := context.WithCancel(context.Background())
	hctx, hcancel := context.WithTimeout(ctx, f.s.timeout)
	cursor, err := f.s.feedHead(hctx)
	hcancel()
	if err != nil {
		f.log.Warn("change feed: cannot read its head yet; subscribers will resync", "error", err)
		cursor = -1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		cancel()
		return
	}
	f.cancel = cancel
	f.running.Go(func() { f.read(ctx, cursor) })
	if f.listen != nil {
		f.running.Go(func() { f.listen(ctx, f.wake, f.resync) })
	}
}

// close stops the reader and the listener and waits for them.
func (f *changeFeed) close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.closed = true
	cancel := f.cancel
	f.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	f.running.Wait()
}

// wake makes the reader read the feed now.
func (f *changeFeed) wake() {
	select {
	case f.wakeC <- struct{}{}:
	default:
	}
}

// resync makes the reader deliver ChangeResync, then read the feed.
func (f *changeFeed) resync() {
	f.resyncDue.Store(true)
	f.wake()
}

// publish hands changes of this process's own writes to the subscribers.
func (f *changeFeed) publish(cs []Change) {
	if f == nil || len(cs) == 0 {
		return
	}
	for _, c := range cs {
		f.deliver(c)
	}
}

// deliver calls every subscriber with c.
func (f *changeFeed) deliver(c Change) {
	f.mu.Lock()
	fns := make([]func(Change), 0, len(f.subs))
	for _, fn := range f.subs {
		fns = append(fns, fn)
	}
	f.mu.Unlock()
	for _, fn := range fns {
		fn(c)
	}
}

// read follows the feed from cursor (-1: not positioned yet) until ctx ends.
func (f *changeFeed) read(ctx context.Context, cursor int64) {
	t := time.NewTicker(f.poll)
	defer t.Stop()
	lastRead := time.Now()
	failing := false
	for {
		err := f.readOnce(ctx, &cursor)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				f.log.Warn("change feed: cannot read; retrying every poll interval", "error", err)
			}
			failing = true
			if time.Since(lastRead) > feedStaleAfter {
				f.resyncDue.Store(true)
			}
		default:
			if failing {
				f.log.Info("change feed: reading again")
			}
			failing = false
			lastRead = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-f.wakeC:
		case <-t.C:
		}
	}
}

// readOnce delivers a due resync, then every entry after *cursor, and moves *cursor.
func (f *changeFeed) readOnce(ctx context.Context, cursor *int64) error {
	rctx, cancel := context.WithTimeout(ctx, f.s.timeout)
	defer cancel()
	if *cursor < 0 {
		head, err := f.s.feedHead(rctx)
		if err != nil {
			return err
		}
		*cursor = head
		f.resyncDue.Store(true)
	}
	if f.resyncDue.Swap(false) {
		f.deliver(Change{Kind: ChangeResync})
	}
	const batch = 1000
	for {
		cs, err := f.s.Changes(rctx, *cursor, batch)
		if err != nil {
			return err
		}
		for _, c := range cs {
			f.deliver(c)
			*cursor = c.Seq
		}
		if len(cs) < batch {
			return nil
		}
	}
}
