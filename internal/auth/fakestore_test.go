package auth

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// The narrow interface must stay a subset of the real contract, signature for signature.
var _ Store = store.Store(nil)

// fakeStore keeps users, sessions, the change feed and signing keys in memory, with
// the semantics store.go documents. Counters and hooks let tests see store traffic.
type fakeStore struct {
	mu       sync.Mutex
	users    map[int64]store.User
	nextUser int64
	sessions map[string]store.Session
	feed     []store.Change
	keys     []store.SigningKey
	touches  int // sessions TouchSessions was given, all calls together
	// pending are the changes of the write in progress, handed to the subscribers
	// once it has released mu (publish), as the real store does after its commit.
	pending []store.Change
	subs    map[int]func(store.Change)
	nextSub int
	// hold keeps changes back from the subscribers until release: a replica that
	// has not heard of them yet.
	hold bool

	sessionReads atomic.Int64
	userReads    atomic.Int64
	keyReads     atomic.Int64
	// down makes the user and session methods fail as a store that does not answer.
	down atomic.Bool
	// afterSessionRead, when set, runs after SessionByID has read (and before it
	// returns) the session: tests use it to hold a load in flight.
	afterSessionRead func()

	// tokens are the API tokens by id (fakestore_apitokens_test.go).
	tokens map[string]store.APIToken

	// networks are the login networks, by account and network; networkReads
	// counts LoginNetworkSeen.
	networks     map[[2]string]time.Time
	networkReads atomic.Int64
}

// NoteLoginNetwork implements store.Store's: the latest time wins.
func (f *fakeStore) NoteLoginNetwork(ctx context.Context, account, network string, at time.Time) error {
	if f.down.Load() {
		return errs.R(errs.Unavailable, errs.ReasonStoreUnavailable, "the store did not answer")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]string{account, network}
	if at.After(f.networks[k]) {
		f.networks[k] = at
	}
	return nil
}

// LoginNetworkSeen implements store.Store's.
func (f *fakeStore) LoginNetworkSeen(ctx context.Context, account, network string) (time.Time, error) {
	f.networkReads.Add(1)
	if f.down.Load() {
		return time.Time{}, errs.R(errs.Unavailable, errs.ReasonStoreUnavailable, "the store did not answer")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.networks[[2]string{account, network}], nil
}

func newFakeStore() *fakeStore {
	return &fakeStore{users: map[int64]store.User{}, sessions: map[string]store.Session{}, subs: map[int]func(store.Change){},
		tokens: map[string]store.APIToken{}, networks: map[[2]string]time.Time{}}
}

// Subscribe implements store.Store's: every subscriber hears every change, right
// after the write (unless held), like replicas on one PostgreSQL.
func (f *fakeStore) Subscribe(fn func(store.Change)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.nextSub
	f.nextSub++
	f.subs[id] = fn
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, id)
	}
}

// publish hands the pending changes to the subscribers; writers defer it before
// they lock mu, so it runs after they unlocked.
func (f *fakeStore) publish() {
	f.mu.Lock()
	if f.hold {
		f.mu.Unlock()
		return
	}
	cs := f.pending
	f.pending = nil
	fns := make([]func(store.Change), 0, len(f.subs))
	for _, fn := range f.subs {
		fns = append(fns, fn)
	}
	f.mu.Unlock()
	for _, c := range cs {
		for _, fn := range fns {
			fn(c)
		}
	}
}

// holdChanges keeps changes from the subscribers until releaseChanges.
func (f *fakeStore) holdChanges() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = true
}

// releaseChanges hands the held changes over.
func (f *fakeStore) releaseChanges() {
	f.mu.Lock()
	f.hold = false
	f.mu.Unlock()
	f.publish()
}

// resync tells every subscriber that changes may have been missed.
func (f *fakeStore) resync() {
	f.mu.Lock()
	f.pending = append(f.pending, store.Change{Kind: store.ChangeResync})
	f.mu.Unlock()
	f.publish()
}

func notFound(what string) error { return errs.E(errs.NotFound, "%s not found", what) }

// unavailable is what the store returns while down, as store.Open's stores do.
func (f *fakeStore) unavailable() error {
	if !f.down.Load() {
		return nil
	}
	return &errs.Error{Kind: errs.Unavailable, Reason: errs.ReasonStoreUnavailable, Message: "the store is down", RetryAfter: 2}
}

func (f *fakeStore) CreateUser(_ context.Context, u store.User) (store.User, error) {
	defer f.publish()
	f.mu.Lock()
	defer f.mu.Unlock()
	u.Email = strings.ToLower(u.Email)
	for _, o := range f.users {
		if o.Email == u.Email {
			return store.User{}, errs.E(errs.Conflict, "e-mail taken")
		}
	}
	f.nextUser++
	u.ID = f.nextUser
	u.CreatedAt, u.UpdatedAt = time.Now().UTC(), time.Now().UTC()
	f.users[u.ID] = u
	f.userChanged(u.ID)
	return u, nil
}

func (f *fakeStore) UserByID(_ context.Context, id int64) (store.User, error) {
	if err := f.unavailable(); err != nil {
		return store.User{}, err
	}
	f.userReads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.users[id]
	if !ok {
		return store.User{}, notFound("user")
	}
	return u, nil
}

func (f *fakeStore) UserByEmail(_ context.Context, email string) (store.User, error) {
	if err := f.unavailable(); err != nil {
		return store.User{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range f.users {
		if strings.EqualFold(u.Email, email) {
			return u, nil
		}
	}
	return store.User{}, notFound("user")
}

func (f *fakeStore) UpdateUser(_ context.Context, u store.User) (store.User, error) {
	defer f.publish()
	f.mu.Lock()
	defer f.mu.Unlock()
	old, ok := f.users[u.ID]
	if !ok {
		return store.User{}, notFound("user")
	}
	old.Nickname, old.PasswordHash, old.Role, old.Disabled = u.Nickname, u.PasswordHash, u.Role, u.Disabled
	old.UpdatedAt = time.Now().UTC()
	f.users[u.ID] = old
	f.userChanged(u.ID)
	return old, nil
}

// setUserUnfed changes a user without feeding the change: a change the feed lost.
func (f *fakeStore) setUserUnfed(u store.User) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[u.ID] = u
}

func (f *fakeStore) deleteUser(id int64) {
	defer f.publish()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.users, id)
	f.userChanged(id)
}

func (f *fakeStore) user(id int64) store.User {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.users[id]
}

func (f *fakeStore) CreateSession(_ context.Context, s store.Session) error {
	if err := f.unavailable(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sessions[s.ID]; ok {
		return errs.E(errs.Conflict, "session exists")
	}
	if s.LastSeenAt.IsZero() {
		s.LastSeenAt = s.CreatedAt
	}
	f.sessions[s.ID] = s
	return nil
}

func (f *fakeStore) SessionByID(_ context.Context, id string) (store.Session, error) {
	if err := f.unavailable(); err != nil {
		return store.Session{}, err
	}
	f.sessionReads.Add(1)
	f.mu.Lock()
	s, ok := f.sessions[id]
	hook := f.afterSessionRead
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	if !ok {
		return store.Session{}, notFound("session")
	}
	return s, nil
}

func (f *fakeStore) session(id string) store.Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[id]
}

func (f *fakeStore) setSession(s store.Session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[s.ID] = s
}

// changed feeds a change of session id; the caller holds f.mu and has deferred
// publish.
func (f *fakeStore) changed(id string) {
	f.feedChange(store.Change{Kind: store.ChangeSession, SessionID: id})
}

// userChanged feeds a change of user id, like changed.
func (f *fakeStore) userChanged(id int64) {
	f.feedChange(store.Change{Kind: store.ChangeUser, UserID: id})
}

func (f *fakeStore) feedChange(c store.Change) {
	c.Seq = int64(len(f.feed)) + 1
	f.feed = append(f.feed, c)
	f.pending = append(f.pending, c)
}

func (f *fakeStore) RotateSession(_ context.Context, id string, from int64, at time.Time) (store.Session, bool, error) {
	if err := f.unavailable(); err != nil {
		return store.Session{}, false, err
	}
	defer f.publish()
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	if !ok {
		return store.Session{}, false, notFound("session")
	}
	if !s.Active(at) || s.Generation != from {
		return s, false, nil
	}
	s.Generation++
	s.RotatedAt, s.LastSeenAt = at, at
	f.sessions[id] = s
	f.changed(id)
	return s, true, nil
}

func (f *fakeStore) RevokeSession(_ context.Context, id string, at time.Time, why string) error {
	defer f.publish()
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	if !ok {
		return notFound("session")
	}
	if s.RevokedAt.IsZero() {
		s.RevokedAt, s.RevokedWhy = at, why
		f.sessions[id] = s
		f.changed(id)
	}
	return nil
}

func (f *fakeStore) RevokeUserSessions(_ context.Context, userID int64, keep string, at time.Time, why string) ([]string, error) {
	defer f.publish()
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id, s := range f.sessions {
		if s.UserID == userID && id != keep && s.Active(at) {
			s.RevokedAt, s.RevokedWhy = at, why
			f.sessions[id] = s
			f.changed(id)
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (f *fakeStore) CountActiveSessions(_ context.Context, now time.Time) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.sessions {
		if s.Active(now) {
			n++
		}
	}
	return n, nil
}

func (f *fakeStore) UserSessions(_ context.Context, userID int64, now time.Time) ([]store.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []store.Session{}
	for _, s := range f.sessions {
		if s.UserID == userID && s.Active(now) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b store.Session) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func (f *fakeStore) TouchSessions(_ context.Context, seen []store.SessionSeen) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.touches += len(seen)
	for _, v := range seen {
		if s, ok := f.sessions[v.ID]; ok && s.LastSeenAt.Before(v.At) {
			s.LastSeenAt = v.At
			f.sessions[v.ID] = s
		}
	}
	return nil
}

func (f *fakeStore) SigningKeys(context.Context) ([]store.SigningKey, error) {
	f.keyReads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.SigningKey(nil), f.keys...), nil
}

func (f *fakeStore) CreateSigningKey(_ context.Context, k store.SigningKey) ([]store.SigningKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.keys) == 0 {
		f.keys = append(f.keys, k)
	}
	return append([]store.SigningKey(nil), f.keys...), nil
}

// AddSigningKey appends k as the newest key and feeds the change, as a rotation does.
func (f *fakeStore) AddSigningKey(_ context.Context, k store.SigningKey) error {
	defer f.publish()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, k)
	f.feedChange(store.Change{Kind: store.ChangeSigningKey})
	return nil
}

func (f *fakeStore) DeleteSupersededSigningKeys(_ context.Context, cutoff time.Time) (int, error) {
	defer f.publish()
	f.mu.Lock()
	defer f.mu.Unlock()
	var kept []store.SigningKey
	for i, k := range f.keys {
		if i < len(f.keys)-1 && f.keys[i+1].CreatedAt.Before(cutoff) {
			continue
		}
		kept = append(kept, k)
	}
	n := len(f.keys) - len(kept)
	f.keys = kept
	if n > 0 {
		f.feedChange(store.Change{Kind: store.ChangeSigningKey})
	}
	return n, nil
}

// ResealSecrets hands over the signing keys only: the fake keeps no clusters.
func (f *fakeStore) ResealSecrets(_ context.Context, fn func(store.SealedSecret) ([]byte, error)) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := append([]store.SigningKey(nil), f.keys...)
	n := 0
	for i, k := range keys {
		v, err := fn(store.SealedSecret{Kind: store.SealedSigningKey, Row: k.ID, Name: k.ID, Value: k.Secret, Clear: !k.Sealed})
		if err != nil {
			return 0, err
		}
		if v != nil {
			keys[i].Secret, keys[i].Sealed = v, true
			n++
		}
	}
	f.keys = keys
	return n, nil
}
