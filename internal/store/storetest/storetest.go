// Package storetest is the contract test suite of store.Store. Every engine runs
// the same Run, so what one engine does the other does too; a test that only one
// engine would pass belongs in that engine's own tests, not here.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Run runs the contract suite. open must return a fresh, empty, migrated store and
// close it when its t ends; Run calls it once per parallel subtest.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Users", testUsers},
		{"Sessions", testSessions},
		{"RotateSessionRace", testRotateSessionRace},
		{"RevokeUserSessions", testRevokeUserSessions},
		{"SessionActivity", testSessionActivity},
		{"APITokens", testAPITokens},
		{"LoginNetworks", testLoginNetworks},
		{"SecondFactors", testSecondFactors},
		{"ConsoleTickets", testConsoleTickets},
		{"SessionChanges", testSessionChanges},
		{"SessionChangesNoGaps", testSessionChangesNoGaps},
		{"ChangeFeed", testChangeFeed},
		{"SubscribeCancel", testSubscribeCancel},
		{"SigningKeys", testSigningKeys},
		{"SigningKeyRotation", testSigningKeyRotation},
		{"ResealSecrets", testResealSecrets},
		{"ResealSecretsRace", testResealSecretsRace},
		{"Clusters", testClusters},
		{"ClusterPVEVersion", testClusterPVEVersion},
		{"Grants", testGrants},
		{"GrantsCascade", testGrantsCascade},
		{"GrantScopes", testGrantScopes},
		{"TaskLifecycle", testTaskLifecycle},
		{"TaskGuestKind", testTaskGuestKind},
		{"ListTasks", testListTasks},
		{"TaskOutcome", testTaskOutcome},
		{"TaskClaims", testTaskClaims},
		{"TaskClaimRace", testTaskClaimRace},
		{"ClockOffset", testClockOffset},
		{"Audit", testAudit},
		{"AuditChain", testAuditChain},
		{"AuditChainRace", testAuditChainRace},
		{"AuditQuery", testAuditQuery},
		{"AuditPrune", testAuditPrune},
		{"Idempotency", testIdempotency},
		{"IdempotencyRace", testIdempotencyRace},
		{"IdempotencyLease", testIdempotencyLease},
		{"IdempotencyTakeOverRace", testIdempotencyTakeOverRace},
		{"Prune", testPrune},
		{"PruneKeepsNewestChange", testPruneKeepsNewestChange},
		{"PruneBatches", testPruneBatches},
		{"PruneRace", testPruneRace},
		{"Operations", testOperations},
		{"OperationItemRace", testOperationItemRace},
		{"OperationItemRetry", testOperationItemRetry},
		{"OperationByIdempotencyKey", testOperationByIdempotencyKey},
		{"OperationHolds", testOperationHolds},
		{"OperationGuestKinds", testOperationGuestKinds},
		{"OperationHoldRace", testOperationHoldRace},
		{"NodeMaintenance", testNodeMaintenance},
		{"OperationProgress", testOperationProgress},
		{"NotifyTargets", testNotifyTargets}, {"NotifyOutbox", testNotifyOutbox}, {"NotifyDeliveries", testNotifyDeliveries}, {"NotifyLeases", testNotifyLeases}, {"NotifyReseal", testNotifyReseal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

// base is the suite's clock: fixed, UTC and at millisecond precision, as the store
// gives times back.
var base = time.Date(2031, 5, 6, 7, 8, 9, 123_000_000, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

// wantKind fails t unless err carries an *errs.Error of kind.
func wantKind(t *testing.T, err error, kind errs.Kind, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got no error, want %v", what, kind)
	}
	if got := errs.KindOf(err); got != kind {
		t.Fatalf("%s: got %v (%v), want %v", what, got, err, kind)
	}
}

// race runs fn(0..n-1) in n goroutines released together. Each goroutine first
// pings s, so that a pooled engine has its connections open before the race starts;
// otherwise connecting would serialise the goroutines and hide a race.
func race(t *testing.T, s store.Store, n int, fn func(i int)) {
	t.Helper()
	var wg, ready sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	for i := range n {
		wg.Go(func() {
			if err := s.Ping(t.Context()); err != nil {
				t.Errorf("ping %d: %v", i, err)
			}
			ready.Done()
			<-start
			fn(i)
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
}

// oneWinner returns which racer of race won, failing t unless exactly one did;
// what names a racer ("claim").
func oneWinner(t *testing.T, won []bool, what string) int {
	t.Helper()
	winner := -1
	for i, w := range won {
		if w {
			if winner >= 0 {
				t.Fatalf("%ss %d and %d both won", what, winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no %s won", what)
	}
	return winner
}

// ok fails t on err.
func ok(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// same fails t unless got and want are deeply equal.
func same(t *testing.T, got, want any, what string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// fresh fails t unless v is a time the store just set: UTC, millisecond precision
// and within a minute of now.
func fresh(t *testing.T, v time.Time, what string) {
	t.Helper()
	if v.Location() != time.UTC || v.Nanosecond()%int(time.Millisecond) != 0 {
		t.Fatalf("%s: %v is not UTC at millisecond precision", what, v)
	}
	if d := time.Since(v); d < -time.Minute || d > time.Minute {
		t.Fatalf("%s: %v is not now", what, v)
	}
}

func mkUser(t *testing.T, s store.Store, email string) store.User {
	t.Helper()
	u, err := s.CreateUser(t.Context(), store.User{Email: email, Nickname: "n", PasswordHash: "$argon2id$x", Role: store.RoleUser})
	ok(t, err, "create user "+email)
	return u
}

func mkCluster(t *testing.T, s store.Store, name string) store.Cluster {
	t.Helper()
	c, err := s.CreateCluster(t.Context(), store.Cluster{Name: name, TokenID: "vmgate@pve!t",
		Endpoints: []store.Endpoint{{URL: "https://" + name + ":8006"}}})
	ok(t, err, "create cluster "+name)
	return c
}

func mkSession(t *testing.T, s store.Store, id string, userID int64, expires time.Time) store.Session {
	t.Helper()
	sess := store.Session{ID: id, UserID: userID, Generation: 1, CreatedAt: base, ExpiresAt: expires,
		RotatedAt: base, Address: "192.0.2.1", UserAgent: "curl/8.5.0", LastSeenAt: base}
	ok(t, s.CreateSession(t.Context(), sess), "create session "+id)
	return sess
}

func testUsers(t *testing.T, s store.Store) {
	ctx := t.Context()
	ok(t, s.Ping(ctx), "ping")
	users, err := s.ListUsers(ctx)
	ok(t, err, "list users")
	same(t, len(users), 0, "users of an empty store")

	alice, err := s.CreateUser(ctx, store.User{Email: "Alice@Example.COM", Nickname: "Alice",
		PasswordHash: "$argon2id$v=19$m=19456,t=2,p=1$salt$hash", Role: store.RoleAdmin})
	ok(t, err, "create alice")
	if alice.ID <= 0 {
		t.Fatalf("create: ID %d, want positive", alice.ID)
	}
	same(t, alice.Email, "alice@example.com", "stored e-mail")
	fresh(t, alice.CreatedAt, "CreatedAt")
	same(t, alice.UpdatedAt, alice.CreatedAt, "UpdatedAt of a new user")

	_, err = s.CreateUser(ctx, store.User{Email: "ALICE@example.com", Role: store.RoleUser})
	wantKind(t, err, errs.Conflict, "e-mail differing only in case")

	got, err := s.UserByEmail(ctx, "aLiCe@EXAMPLE.com")
	ok(t, err, "user by e-mail")
	same(t, got, alice, "user by e-mail")
	got, err = s.UserByID(ctx, alice.ID)
	ok(t, err, "user by ID")
	same(t, got, alice, "user by ID")
	_, err = s.UserByID(ctx, alice.ID+1000)
	wantKind(t, err, errs.NotFound, "missing user by ID")
	_, err = s.UserByEmail(ctx, "nobody@example.com")
	wantKind(t, err, errs.NotFound, "missing user by e-mail")

	bob := mkUser(t, s, "bob@example.com")
	users, err = s.ListUsers(ctx)
	ok(t, err, "list users")
	same(t, users, []store.User{alice, bob}, "users by ID")

	bob.Nickname, bob.PasswordHash, bob.Role, bob.Disabled = "Bobby", "$argon2id$new", store.RoleAdmin, true
	bob.Email = "changed@example.com" // not a field UpdateUser writes
	updated, err := s.UpdateUser(ctx, bob)
	ok(t, err, "update bob")
	if updated.Nickname != "Bobby" || updated.PasswordHash != "$argon2id$new" || updated.Role != store.RoleAdmin || !updated.Disabled {
		t.Fatalf("update: got %+v", updated)
	}
	same(t, updated.Email, "bob@example.com", "e-mail after update")
	if updated.UpdatedAt.Before(updated.CreatedAt) {
		t.Fatalf("update: UpdatedAt %v before CreatedAt %v", updated.UpdatedAt, updated.CreatedAt)
	}
	got, err = s.UserByID(ctx, bob.ID)
	ok(t, err, "reread bob")
	same(t, got, updated, "bob after update")
	_, err = s.UpdateUser(ctx, store.User{ID: bob.ID + 1000, Role: store.RoleUser})
	wantKind(t, err, errs.NotFound, "update a missing user")

	ok(t, s.DeleteUser(ctx, bob.ID), "delete bob")
	_, err = s.UserByID(ctx, bob.ID)
	wantKind(t, err, errs.NotFound, "deleted user")
	wantKind(t, s.DeleteUser(ctx, bob.ID), errs.NotFound, "delete a missing user")

	// A deleted user's e-mail is free again, and IDs are never reused.
	again := mkUser(t, s, "bob@example.com")
	if again.ID <= bob.ID {
		t.Fatalf("new user got ID %d, not above the deleted %d", again.ID, bob.ID)
	}
}

func testSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "s@example.com")
	sess := mkSession(t, s, "sid-1", u.ID, at(24*time.Hour))

	got, err := s.SessionByID(ctx, "sid-1")
	ok(t, err, "session by ID")
	same(t, got, sess, "session")
	if !got.Active(at(time.Hour)) || got.Active(at(24*time.Hour)) {
		t.Fatalf("Active: wrong at %v", got)
	}
	_, err = s.SessionByID(ctx, "nope")
	wantKind(t, err, errs.NotFound, "missing session")
	wantKind(t, s.CreateSession(ctx, sess), errs.Conflict, "duplicate session ID")
	wantKind(t, s.CreateSession(ctx, store.Session{ID: "orphan", UserID: u.ID + 1000, Generation: 1,
		ExpiresAt: at(time.Hour)}), errs.NotFound, "session of a missing user")

	n, err := s.CountActiveSessions(ctx, at(time.Hour))
	ok(t, err, "count")
	same(t, n, 1, "active sessions")

	rotated, won, err := s.RotateSession(ctx, "sid-1", 1, at(time.Hour))
	ok(t, err, "rotate")
	if !won || rotated.Generation != 2 || !rotated.RotatedAt.Equal(at(time.Hour)) || !rotated.CreatedAt.Equal(base) {
		t.Fatalf("rotate: won %v, %+v", won, rotated)
	}
	cur, won, err := s.RotateSession(ctx, "sid-1", 1, at(2*time.Hour))
	ok(t, err, "rotate a stale generation")
	if won {
		t.Fatal("rotating a stale generation succeeded")
	}
	same(t, cur, rotated, "session after a lost rotation")
	_, won, err = s.RotateSession(ctx, "sid-1", 2, at(24*time.Hour))
	ok(t, err, "rotate at expiry")
	if won {
		t.Fatal("rotating an expired session succeeded")
	}
	_, _, err = s.RotateSession(ctx, "nope", 1, at(time.Hour))
	wantKind(t, err, errs.NotFound, "rotate a missing session")

	ok(t, s.RevokeSession(ctx, "sid-1", at(3*time.Hour), "logout"), "revoke")
	got, err = s.SessionByID(ctx, "sid-1")
	ok(t, err, "reread revoked")
	if !got.RevokedAt.Equal(at(3*time.Hour)) || got.RevokedWhy != "logout" || got.Active(at(4*time.Hour)) {
		t.Fatalf("revoked session: %+v", got)
	}
	ok(t, s.RevokeSession(ctx, "sid-1", at(5*time.Hour), "admin"), "revoke again")
	again, err := s.SessionByID(ctx, "sid-1")
	ok(t, err, "reread")
	same(t, again, got, "second revocation is a no-op")
	_, won, err = s.RotateSession(ctx, "sid-1", 2, at(4*time.Hour))
	ok(t, err, "rotate revoked")
	if won {
		t.Fatal("rotating a revoked session succeeded")
	}
	wantKind(t, s.RevokeSession(ctx, "nope", at(time.Hour), "logout"), errs.NotFound, "revoke a missing session")

	n, err = s.CountActiveSessions(ctx, at(4*time.Hour))
	ok(t, err, "count")
	same(t, n, 0, "active sessions after revocation")
}

func testRotateSessionRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "race@example.com")
	mkSession(t, s, "sid-race", u.ID, at(24*time.Hour))

	const n = 50
	var (
		won  = make([]bool, n)
		gens = make([]int64, n)
		errc = make([]error, n)
	)
	race(t, s, n, func(i int) {
		sess, w, err := s.RotateSession(ctx, "sid-race", 1, at(time.Minute))
		won[i], gens[i], errc[i] = w, sess.Generation, err
	})
	wins := 0
	for i := range n {
		ok(t, errc[i], fmt.Sprintf("rotation %d", i))
		if won[i] {
			wins++
		}
		same(t, gens[i], int64(2), fmt.Sprintf("generation seen by rotation %d", i))
	}
	same(t, wins, 1, "winning rotations")
	same(t, len(sessionFeed(t, s, 0)), 1, "feed entries of one rotation")
}

func testRevokeUserSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "many@example.com")
	other := mkUser(t, s, "other@example.com")
	mkSession(t, s, "a", u.ID, at(24*time.Hour))
	mkSession(t, s, "b", u.ID, at(24*time.Hour))
	mkSession(t, s, "c", u.ID, at(24*time.Hour))
	mkSession(t, s, "old", u.ID, at(time.Minute)) // expired by the time of revocation
	mkSession(t, s, "o", other.ID, at(24*time.Hour))
	ok(t, s.RevokeSession(ctx, "c", at(time.Hour), "logout"), "revoke c")

	ids, err := s.RevokeUserSessions(ctx, u.ID, "a", at(2*time.Hour), "password")
	ok(t, err, "revoke user sessions")
	same(t, ids, []string{"b"}, "revoked IDs")
	for id, want := range map[string]string{"a": "", "b": "password", "c": "logout", "old": "", "o": ""} {
		sess, err := s.SessionByID(ctx, id)
		ok(t, err, "read "+id)
		same(t, sess.RevokedWhy, want, "reason of "+id)
	}

	ids, err = s.RevokeUserSessions(ctx, u.ID, "", at(3*time.Hour), "disabled")
	ok(t, err, "revoke all")
	same(t, ids, []string{"a"}, "revoked IDs with no keep")
	ids, err = s.RevokeUserSessions(ctx, u.ID, "", at(4*time.Hour), "disabled")
	ok(t, err, "revoke none")
	same(t, len(ids), 0, "revoked IDs when none is active")
}

func testSessionChanges(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "feed@example.com")
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		mkSession(t, s, id, u.ID, at(24*time.Hour))
	}
	head := feedHead(t, s)
	changes, err := s.Changes(ctx, head, 10)
	ok(t, err, "changes of a quiet store")
	same(t, len(changes), 0, "changes before any")

	ok(t, s.RevokeSession(ctx, "s3", at(time.Minute), "logout"), "revoke s3")
	_, _, err = s.RotateSession(ctx, "s1", 1, at(2*time.Minute))
	ok(t, err, "rotate s1")
	ok(t, s.RevokeSession(ctx, "s3", at(3*time.Minute), "logout"), "revoke s3 again") // no-op, no change
	_, err = s.RevokeUserSessions(ctx, u.ID, "s1", at(4*time.Minute), "password")     // s2, s4
	ok(t, err, "revoke the rest")

	changes, err = s.Changes(ctx, head, 10)
	ok(t, err, "changes")
	var ids []string
	for i, c := range changes {
		if c.Kind != store.ChangeSession {
			t.Fatalf("change of kind %s among session changes: %+v", c.Kind, c)
		}
		ids = append(ids, c.SessionID)
		if i > 0 && c.Seq <= changes[i-1].Seq {
			t.Fatalf("changes out of order: %+v", changes)
		}
	}
	same(t, ids, []string{"s3", "s1", "s2", "s4"}, "changed sessions in order")

	page, err := s.Changes(ctx, changes[0].Seq, 2)
	ok(t, err, "page")
	same(t, page, changes[1:3], "changes after the first, two at most")
	page, err = s.Changes(ctx, changes[3].Seq, 10)
	ok(t, err, "page past the end")
	same(t, len(page), 0, "changes after the last")
}

// testSessionChangesNoGaps polls the feed while many sessions are revoked at once:
// a poller that moves past a sequence number must never see it commit later.
func testSessionChangesNoGaps(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "gaps@example.com")
	const n = 40
	for i := range n {
		mkSession(t, s, fmt.Sprint("g", i), u.ID, at(24*time.Hour))
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.RevokeSession(ctx, fmt.Sprint("g", i), at(time.Minute), "logout"); err != nil {
				t.Errorf("revoke g%d: %v", i, err)
			}
		})
	}
	seen := map[string]bool{}
	var after int64
	poll := func() {
		changes, err := s.Changes(ctx, after, 7)
		ok(t, err, "poll")
		for _, c := range changes {
			if c.Kind == store.ChangeSession {
				seen[c.SessionID] = true
			}
			after = c.Seq
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		poll()
	}
	for range n { // drain what committed after the last poll
		poll()
	}
	same(t, len(seen), n, "sessions seen by an incremental poller")
}

// received collects what a subscriber is given.
type received struct {
	mu  sync.Mutex
	got []store.Change
}

func (r *received) add(c store.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, c)
}

// has reports whether c was received (at least once).
func (r *received) has(c store.Change) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.got, c)
}

// testChangeFeed makes every kind of write and checks the entry each feeds: in the
// feed, in order, and to a subscriber of this process before the write returns (a
// replica never serves from its cache what it has itself just changed). Writes that
// change nothing feed nothing.
func testChangeFeed(t *testing.T, s store.Store) {
	ctx := t.Context()
	var sub received
	defer s.Subscribe(sub.add)()
	head := feedHead(t, s)

	var want []store.Change
	fed := func(what string, c store.Change) {
		t.Helper()
		cs, err := s.Changes(ctx, head, 10)
		ok(t, err, "read the feed after "+what)
		if len(cs) != 1 {
			t.Fatalf("%s: fed %+v, want one %s change", what, cs, c.Kind)
		}
		c.Seq = cs[0].Seq
		same(t, cs[0], c, "change fed by "+what)
		if !sub.has(c) {
			t.Fatalf("%s: the subscriber had not received %+v when the write returned", what, c)
		}
		head = c.Seq
		want = append(want, c)
	}
	nothing := func(what string) {
		t.Helper()
		cs, err := s.Changes(ctx, head, 10)
		ok(t, err, "read the feed after "+what)
		same(t, len(cs), 0, "changes fed by "+what)
	}
	user := func(id int64) store.Change { return store.Change{Kind: store.ChangeUser, UserID: id} }
	cluster := func(id int64) store.Change { return store.Change{Kind: store.ChangeCluster, ClusterID: id} }
	grant := func(u, c int64) store.Change { return store.Change{Kind: store.ChangeGrant, UserID: u, ClusterID: c} }
	session := func(id string) store.Change { return store.Change{Kind: store.ChangeSession, SessionID: id} }

	u := mkUser(t, s, "fed@example.com")
	fed("create user", user(u.ID))
	c := mkCluster(t, s, "fed")
	fed("create cluster", cluster(c.ID))
	u.Disabled = true
	_, err := s.UpdateUser(ctx, u)
	ok(t, err, "disable user")
	fed("disable user", user(u.ID))
	u.PasswordHash, u.Disabled = "$argon2id$other", false
	_, err = s.UpdateUser(ctx, u)
	ok(t, err, "change password")
	fed("change password", user(u.ID))
	_, err = s.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c.ID, Role: store.GrantViewer})
	ok(t, err, "grant")
	fed("grant", grant(u.ID, c.ID))
	_, err = s.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c.ID, Role: store.GrantOperator})
	ok(t, err, "change the grant's role")
	fed("change the grant's role", grant(u.ID, c.ID))
	ok(t, s.DeleteGrant(ctx, u.ID, c.ID), "remove grant")
	fed("remove grant", grant(u.ID, c.ID))
	c.Endpoints = append(c.Endpoints, store.Endpoint{URL: "https://fed2:8006"})
	_, err = s.UpdateCluster(ctx, c)
	ok(t, err, "update cluster")
	fed("update cluster", cluster(c.ID))

	mkSession(t, s, "fed-1", u.ID, at(time.Hour))
	mkSession(t, s, "fed-2", u.ID, at(time.Hour))
	nothing("create sessions") // nobody can hold a stale copy of a new session
	_, _, err = s.RotateSession(ctx, "fed-1", 1, at(time.Minute))
	ok(t, err, "rotate")
	fed("rotate session", session("fed-1"))
	ok(t, s.RevokeSession(ctx, "fed-1", at(2*time.Minute), "logout"), "logout")
	fed("logout", session("fed-1"))
	ok(t, s.RevokeSession(ctx, "fed-1", at(3*time.Minute), "logout"), "logout again")
	nothing("revoke a revoked session")
	_, err = s.RevokeUserSessions(ctx, u.ID, "", at(4*time.Minute), "disabled")
	ok(t, err, "revoke the user's sessions")
	fed("revoke the user's sessions", session("fed-2"))

	_, err = s.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c.ID, Role: store.GrantViewer})
	ok(t, err, "grant again")
	fed("grant again", grant(u.ID, c.ID))
	ok(t, s.DeleteCluster(ctx, c.ID), "delete cluster")
	fed("delete cluster (and its grants)", cluster(c.ID))
	ok(t, s.DeleteUser(ctx, u.ID), "delete user")
	fed("delete user", user(u.ID))

	_, err = s.UpdateUser(ctx, u)
	wantKind(t, err, errs.NotFound, "update a deleted user")
	wantKind(t, s.DeleteUser(ctx, u.ID), errs.NotFound, "delete a deleted user")
	wantKind(t, s.DeleteGrant(ctx, u.ID, c.ID), errs.NotFound, "remove a missing grant")
	_, err = s.UpdateCluster(ctx, c)
	wantKind(t, err, errs.NotFound, "update a deleted cluster")
	wantKind(t, s.DeleteCluster(ctx, c.ID), errs.NotFound, "delete a deleted cluster")
	_, err = s.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c.ID, Role: store.GrantViewer})
	wantKind(t, err, errs.NotFound, "grant to a deleted user")
	_, err = s.CreateUser(ctx, store.User{Email: "other@example.com", Role: "no-such-role"})
	wantKind(t, err, errs.Invalid, "create an invalid user")
	nothing("failed writes")
	for i := 1; i < len(want); i++ {
		if want[i].Seq <= want[i-1].Seq {
			t.Fatalf("feed out of order: %+v", want)
		}
	}
}

// testSubscribeCancel: a cancelled subscription is given nothing committed after the
// cancel, and other subscribers still are.
func testSubscribeCancel(t *testing.T, s store.Store) {
	var gone, stays received
	cancel := s.Subscribe(gone.add)
	defer s.Subscribe(stays.add)()
	u := mkUser(t, s, "before@example.com")
	before := store.Change{Kind: store.ChangeUser, UserID: u.ID, Seq: feedHead(t, s)}
	if !gone.has(before) || !stays.has(before) {
		t.Fatalf("change before the cancel: %+v not received by both", before)
	}
	cancel()
	cancel() // twice is harmless
	u = mkUser(t, s, "after@example.com")
	after := store.Change{Kind: store.ChangeUser, UserID: u.ID, Seq: feedHead(t, s)}
	if !stays.has(after) {
		t.Fatalf("change after the cancel: %+v not received by the remaining subscriber", after)
	}
	if gone.has(after) {
		t.Fatalf("change after the cancel: %+v received by the cancelled subscriber", after)
	}
}

func testSigningKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	keys, err := s.SigningKeys(ctx)
	ok(t, err, "keys of an empty store")
	same(t, len(keys), 0, "keys of an empty store")

	// Replicas starting together each offer a key; all settle on one.
	const n = 8
	lists := make([][]store.SigningKey, n)
	race(t, s, n, func(i int) {
		k := store.SigningKey{ID: fmt.Sprint("kid-", i), Secret: bytes.Repeat([]byte{byte(i)}, 32), CreatedAt: at(time.Duration(i))}
		l, err := s.CreateSigningKey(ctx, k)
		if err != nil {
			t.Errorf("create key %d: %v", i, err)
		}
		lists[i] = l
	})
	for i := range n {
		if len(lists[i]) != 1 {
			t.Fatalf("replica %d got %d keys, want 1: %+v", i, len(lists[i]), lists[i])
		}
		same(t, lists[i], lists[0], fmt.Sprint("keys seen by replica ", i))
	}
	keys, err = s.SigningKeys(ctx)
	ok(t, err, "keys")
	same(t, keys, lists[0], "stored keys")
	if len(keys[0].Secret) != 32 || keys[0].CreatedAt.Location() != time.UTC {
		t.Fatalf("stored key: %+v", keys[0])
	}
}

// testSigningKeyRotation: added keys follow the first, newest last, each feeding a
// signing-key change; superseded keys go once their successor is older than the
// cutoff, never the newest.
func testSigningKeyRotation(t *testing.T, s store.Store) {
	ctx := t.Context()
	key := func(i int) store.SigningKey {
		return store.SigningKey{ID: fmt.Sprint("kid-", i), Secret: bytes.Repeat([]byte{byte(i)}, 53), Sealed: true,
			CreatedAt: at(time.Duration(i) * time.Hour)}
	}
	_, err := s.CreateSigningKey(ctx, key(0))
	ok(t, err, "first key")
	head := feedHead(t, s)
	ok(t, s.AddSigningKey(ctx, key(1)), "add key 1")
	ok(t, s.AddSigningKey(ctx, key(2)), "add key 2")
	wantKind(t, s.AddSigningKey(ctx, key(1)), errs.Conflict, "add key 1 again")
	cs, err := s.Changes(ctx, head, 10)
	ok(t, err, "feed")
	if len(cs) != 2 || cs[0].Kind != store.ChangeSigningKey || cs[1].Kind != store.ChangeSigningKey {
		t.Fatalf("feed after two rotations: %+v", cs)
	}
	keys, err := s.SigningKeys(ctx)
	ok(t, err, "keys")
	same(t, keys, []store.SigningKey{key(0), key(1), key(2)}, "keys after two rotations")

	// Key 0 was superseded at +1h, key 1 at +2h.
	n, err := s.DeleteSupersededSigningKeys(ctx, at(time.Hour))
	ok(t, err, "delete superseded before +1h")
	same(t, n, 0, "keys superseded before +1h")
	head = feedHead(t, s)
	n, err = s.DeleteSupersededSigningKeys(ctx, at(time.Hour+time.Millisecond))
	ok(t, err, "delete superseded before +1h1ms")
	same(t, n, 1, "keys superseded before +1h1ms")
	if cs, err := s.Changes(ctx, head, 10); err != nil || len(cs) != 1 || cs[0].Kind != store.ChangeSigningKey {
		t.Fatalf("feed after a deletion: %+v %v", cs, err)
	}
	n, err = s.DeleteSupersededSigningKeys(ctx, at(1000*time.Hour))
	ok(t, err, "delete superseded long after")
	same(t, n, 1, "keys superseded long after")
	keys, err = s.SigningKeys(ctx)
	ok(t, err, "keys")
	same(t, keys, []store.SigningKey{key(2)}, "the newest key stays")
}

// testResealSecrets: every signing key (raw ones flagged Clear) and every cluster
// secret reaches fn in one transaction; what fn returns replaces the value (and
// marks a signing key sealed), nil keeps it, and an error changes nothing.
func testResealSecrets(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.CreateSigningKey(ctx, store.SigningKey{ID: "raw", Secret: []byte("raw-key"), CreatedAt: at(0)})
	ok(t, err, "raw key")
	ok(t, s.AddSigningKey(ctx, store.SigningKey{ID: "sealed", Secret: []byte("sealed-key"), Sealed: true, CreatedAt: at(time.Hour)}), "sealed key")
	c1, err := s.CreateCluster(ctx, store.Cluster{Name: "one", TokenID: "a@pve!x", TokenSecretSealed: []byte("s1")})
	ok(t, err, "cluster one")
	c2, err := s.CreateCluster(ctx, store.Cluster{Name: "two", TokenID: "b@pve!y", TokenSecretSealed: []byte("s2")})
	ok(t, err, "cluster two")

	var seen []store.SealedSecret
	_, err = s.ResealSecrets(ctx, func(sec store.SealedSecret) ([]byte, error) {
		seen = append(seen, sec)
		if len(seen) == 3 {
			return nil, errors.New("crash")
		}
		return append([]byte("new-"), sec.Value...), nil
	})
	if err == nil || !strings.Contains(err.Error(), "crash") {
		t.Fatalf("a failing fn: %v", err)
	}
	same(t, seen, []store.SealedSecret{
		{Kind: store.SealedSigningKey, Row: "raw", Name: "raw", Value: []byte("raw-key"), Clear: true},
		{Kind: store.SealedSigningKey, Row: "sealed", Name: "sealed", Value: []byte("sealed-key")},
		{Kind: store.SealedClusterToken, Row: fmt.Sprint(c1.ID), Name: "a@pve!x", Value: []byte("s1")},
	}, "secrets handed to fn")
	keys, err := s.SigningKeys(ctx)
	ok(t, err, "keys")
	if string(keys[0].Secret) != "raw-key" || keys[0].Sealed || string(keys[1].Secret) != "sealed-key" {
		t.Fatalf("a failed reseal changed the keys: %+v", keys)
	}

	head := feedHead(t, s)
	n, err := s.ResealSecrets(ctx, func(sec store.SealedSecret) ([]byte, error) {
		if sec.Row == "sealed" {
			return nil, nil
		}
		return append([]byte("new-"), sec.Value...), nil
	})
	ok(t, err, "reseal")
	same(t, n, 3, "values replaced")
	keys, err = s.SigningKeys(ctx)
	ok(t, err, "keys")
	if string(keys[0].Secret) != "new-raw-key" || !keys[0].Sealed || string(keys[1].Secret) != "sealed-key" || !keys[1].Sealed {
		t.Fatalf("keys after the reseal: %+v", keys)
	}
	for _, c := range []store.Cluster{c1, c2} {
		got, err := s.ClusterByID(ctx, c.ID)
		ok(t, err, "cluster")
		same(t, string(got.TokenSecretSealed), "new-"+string(c.TokenSecretSealed), "resealed secret of "+c.Name)
		same(t, got.UpdatedAt, c.UpdatedAt, "updated_at of "+c.Name)
	}
	cs, err := s.Changes(ctx, head, 10)
	ok(t, err, "feed")
	same(t, cs, []store.Change{
		{Seq: cs[0].Seq, Kind: store.ChangeSigningKey},
		{Seq: cs[0].Seq + 1, Kind: store.ChangeCluster, ClusterID: c1.ID},
		{Seq: cs[0].Seq + 2, Kind: store.ChangeCluster, ClusterID: c2.ID},
	}, "feed after the reseal")
}

// testResealSecretsRace: replicas resealing at once take turns, each seeing what
// the one before wrote, so a raw key is sealed exactly once (docs/security.md item 25's
// migration in place).
func testResealSecretsRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.CreateSigningKey(ctx, store.SigningKey{ID: "raw", Secret: []byte("k"), CreatedAt: at(0)})
	ok(t, err, "raw key")
	const n = 6
	counts := make([]int, n)
	race(t, s, n, func(i int) {
		c, err := s.ResealSecrets(ctx, func(sec store.SealedSecret) ([]byte, error) {
			if !sec.Clear {
				return nil, nil
			}
			return append([]byte("sealed:"), sec.Value...), nil
		})
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
		counts[i] = c
	})
	total := 0
	for _, c := range counts {
		total += c
	}
	same(t, total, 1, "keys sealed over all replicas")
	keys, err := s.SigningKeys(ctx)
	ok(t, err, "keys")
	if len(keys) != 1 || string(keys[0].Secret) != "sealed:k" || !keys[0].Sealed {
		t.Fatalf("after the race: %+v", keys)
	}
}

func testClusters(t *testing.T, s store.Store) {
	ctx := t.Context()
	cs, err := s.ListClusters(ctx)
	ok(t, err, "list clusters of an empty store")
	same(t, len(cs), 0, "clusters of an empty store")

	in := store.Cluster{
		Name: "prod",
		Endpoints: []store.Endpoint{
			{URL: "https://pve3:8006", Node: "pve3", Fingerprint: "AA:BB"},
			{URL: "https://pve1:8006", Node: "pve1", Fingerprint: "CC:DD"},
			{URL: "https://pve2:8006"},
		},
		TokenID:            "vmgate@pve!prod",
		TokenSecretSealed:  []byte{0, 1, 2, 250, 251, 255},
		CACert:             "-----BEGIN CERTIFICATE-----\n...",
		InsecureSkipVerify: true,
	}
	prod, err := s.CreateCluster(ctx, in)
	ok(t, err, "create prod")
	if prod.ID <= 0 {
		t.Fatalf("create: ID %d", prod.ID)
	}
	fresh(t, prod.CreatedAt, "CreatedAt")
	want := in
	want.ID, want.CreatedAt, want.UpdatedAt = prod.ID, prod.CreatedAt, prod.CreatedAt
	same(t, prod, want, "created cluster")
	got, err := s.ClusterByID(ctx, prod.ID)
	ok(t, err, "cluster by ID")
	same(t, got, want, "cluster by ID")

	_, err = s.CreateCluster(ctx, store.Cluster{Name: "prod"})
	wantKind(t, err, errs.Conflict, "duplicate name")
	bare, err := s.CreateCluster(ctx, store.Cluster{Name: "bare"})
	ok(t, err, "cluster without endpoints")
	same(t, len(bare.Endpoints), 0, "endpoints of a bare cluster")

	cs, err = s.ListClusters(ctx)
	ok(t, err, "list")
	same(t, cs, []store.Cluster{want, bare}, "clusters by ID")

	prod.Name = "production"
	prod.Endpoints = []store.Endpoint{{URL: "https://pve2:8006", Node: "pve2"}, prod.Endpoints[0]}
	prod.TokenSecretSealed = []byte("resealed")
	prod.CACert, prod.InsecureSkipVerify = "", false
	updated, err := s.UpdateCluster(ctx, prod)
	ok(t, err, "update")
	if updated.UpdatedAt.Before(updated.CreatedAt) || !updated.CreatedAt.Equal(prod.CreatedAt) {
		t.Fatalf("update times: %+v", updated)
	}
	prod.UpdatedAt = updated.UpdatedAt
	same(t, updated, prod, "updated cluster")
	got, err = s.ClusterByID(ctx, prod.ID)
	ok(t, err, "reread")
	same(t, got, prod, "cluster after update")

	renamed := bare
	renamed.Name = "production"
	_, err = s.UpdateCluster(ctx, renamed)
	wantKind(t, err, errs.Conflict, "rename onto a taken name")
	got, err = s.ClusterByID(ctx, bare.ID)
	ok(t, err, "reread bare")
	same(t, got, bare, "cluster after a failed rename")
	_, err = s.UpdateCluster(ctx, store.Cluster{ID: prod.ID + 1000, Name: "x"})
	wantKind(t, err, errs.NotFound, "update a missing cluster")

	ok(t, s.DeleteCluster(ctx, prod.ID), "delete")
	_, err = s.ClusterByID(ctx, prod.ID)
	wantKind(t, err, errs.NotFound, "deleted cluster")
	wantKind(t, s.DeleteCluster(ctx, prod.ID), errs.NotFound, "delete a missing cluster")
	cs, err = s.ListClusters(ctx)
	ok(t, err, "list")
	same(t, cs, []store.Cluster{bare}, "clusters after delete")
}

func testGrants(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "g@example.com")
	c1, c2 := mkCluster(t, s, "c1"), mkCluster(t, s, "c2")

	gs, err := s.UserGrants(ctx, u.ID)
	ok(t, err, "grants of a new user")
	same(t, len(gs), 0, "grants of a new user")
	_, err = s.GrantFor(ctx, u.ID, c1.ID)
	wantKind(t, err, errs.NotFound, "missing grant")

	g2, err := s.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c2.ID, Role: store.GrantViewer, CreatedAt: at(0)})
	ok(t, err, "grant c2")
	same(t, g2, store.Grant{UserID: u.ID, ClusterID: c2.ID, Role: store.GrantViewer, CreatedAt: at(0)}, "grant c2")
	g1, err := s.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c1.ID, Role: store.GrantOperator})
	ok(t, err, "grant c1")
	fresh(t, g1.CreatedAt, "CreatedAt of a grant")

	changed, err := s.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c2.ID, Role: store.GrantOperator, CreatedAt: at(time.Hour)})
	ok(t, err, "change role")
	g2.Role = store.GrantOperator
	same(t, changed, g2, "changing the role keeps CreatedAt")
	got, err := s.GrantFor(ctx, u.ID, c2.ID)
	ok(t, err, "grant for")
	same(t, got, g2, "grant after a role change")
	gs, err = s.UserGrants(ctx, u.ID)
	ok(t, err, "user grants")
	same(t, gs, []store.Grant{g1, g2}, "grants by cluster ID")

	_, err = s.PutGrant(ctx, store.Grant{UserID: u.ID + 1000, ClusterID: c1.ID, Role: store.GrantViewer})
	wantKind(t, err, errs.NotFound, "grant to a missing user")
	_, err = s.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c2.ID + 1000, Role: store.GrantViewer})
	wantKind(t, err, errs.NotFound, "grant on a missing cluster")

	ok(t, s.DeleteGrant(ctx, u.ID, c1.ID), "delete grant")
	_, err = s.GrantFor(ctx, u.ID, c1.ID)
	wantKind(t, err, errs.NotFound, "deleted grant")
	wantKind(t, s.DeleteGrant(ctx, u.ID, c1.ID), errs.NotFound, "delete a missing grant")
}

func testGrantsCascade(t *testing.T, s store.Store) {
	ctx := t.Context()
	u1, u2 := mkUser(t, s, "u1@example.com"), mkUser(t, s, "u2@example.com")
	c1, c2 := mkCluster(t, s, "c1"), mkCluster(t, s, "c2")
	for _, u := range []store.User{u1, u2} {
		for _, c := range []store.Cluster{c1, c2} {
			_, err := s.PutGrant(ctx, store.Grant{UserID: u.ID, ClusterID: c.ID, Role: store.GrantViewer})
			ok(t, err, "grant")
		}
	}

	ok(t, s.DeleteCluster(ctx, c1.ID), "delete c1")
	for _, u := range []store.User{u1, u2} {
		gs, err := s.UserGrants(ctx, u.ID)
		ok(t, err, "grants")
		if len(gs) != 1 || gs[0].ClusterID != c2.ID {
			t.Fatalf("grants of user %d after deleting cluster %d: %+v", u.ID, c1.ID, gs)
		}
	}
	ok(t, s.DeleteUser(ctx, u1.ID), "delete u1")
	gs, err := s.UserGrants(ctx, u1.ID)
	ok(t, err, "grants of a deleted user")
	same(t, len(gs), 0, "grants of a deleted user")
	_, err = s.GrantFor(ctx, u2.ID, c2.ID)
	ok(t, err, "grant of the other user stays")
}

// testTaskGuestKind: a container's row keeps its kind, a row without one is a
// VM's, and a kind PVE does not have is refused by the schema.
func testTaskGuestKind(t *testing.T, s store.Store) {
	ctx := t.Context()
	ct, err := s.CreateTask(ctx, store.Task{ClusterID: 7, UserID: 3, Op: "start", GuestKind: store.GuestLXC, Node: "pve1", VMID: 200})
	ok(t, err, "a container's task")
	if back, err := s.TaskByID(ctx, ct.ID); err != nil || back.GuestKind != store.GuestLXC {
		t.Fatalf("the container's row read back: %+v, %v", back, err)
	}
	vm, err := s.CreateTask(ctx, store.Task{ClusterID: 7, UserID: 3, Op: "start", Node: "pve1", VMID: 100})
	ok(t, err, "a VM's task")
	if vm.GuestKind != store.GuestQemu {
		t.Fatalf("a row without a kind reads %q, want qemu", vm.GuestKind)
	}
	if _, err := s.CreateTask(ctx, store.Task{ClusterID: 7, UserID: 3, Op: "start", GuestKind: "openvz", VMID: 300}); err == nil {
		t.Fatal("a row of guest kind openvz was stored")
	}
}

func testTaskLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := store.Task{ClusterID: 7, UserID: 3, UserEmail: "op@example.com", Op: "migrate", Node: "pve1",
		VMID: 100, Target: "pve2", Params: `{"online":true}`}
	task, err := s.CreateTask(ctx, in)
	ok(t, err, "create task")
	if task.ID <= 0 || task.Status != store.TaskPending || task.UPID != "" || !task.StartedAt.IsZero() {
		t.Fatalf("created task: %+v", task)
	}
	fresh(t, task.CreatedAt, "CreatedAt")
	same(t, task.UpdatedAt, task.CreatedAt, "UpdatedAt of a new task")
	want := in
	want.ID, want.Status, want.CreatedAt, want.UpdatedAt = task.ID, store.TaskPending, task.CreatedAt, task.CreatedAt
	want.GuestKind = store.GuestQemu // no kind given: a VM, as every row from before the kinds
	same(t, task, want, "created task")

	// Many tasks may wait for their UPID at once.
	other, err := s.CreateTask(ctx, store.Task{ClusterID: 7, UserID: 3, Op: "start", VMID: 101})
	ok(t, err, "second pending task")

	const upid = "UPID:pve1:0000A1B2:0001C3D4:6650A0B0:qmigrate:100:vmgate@pve!t:"
	withUPID := task
	withUPID.UPID = upid
	_, err = s.UpdateTask(ctx, withUPID)
	wantKind(t, err, errs.Conflict, "UpdateTask setting a UPID")
	running, displaced, err := s.ClaimTaskUPID(ctx, task.ID, store.TaskClaim{UPID: upid, Node: "pve1", StartedAt: at(0),
		Source: store.UPIDAnswered})
	ok(t, err, "record UPID")
	same(t, displaced.ID, int64(0), "displaced by a first claim")
	task.UPID, task.Status, task.StartedAt, task.UPIDSource = upid, store.TaskRunning, at(0), store.UPIDAnswered
	task.UpdatedAt = stamped(t, running, task)
	same(t, running, task, "running task")
	got, err := s.TaskByUPID(ctx, upid)
	ok(t, err, "task by UPID")
	same(t, got, task, "task by UPID")
	_, err = s.TaskByUPID(ctx, "UPID:nope")
	wantKind(t, err, errs.NotFound, "missing UPID")

	_, _, err = s.ClaimTaskUPID(ctx, other.ID, store.TaskClaim{UPID: upid, Node: "pve1", Source: store.UPIDFound})
	wantKind(t, err, errs.Conflict, "a search claiming another task's UPID")
	_, _, err = s.ClaimTaskUPID(ctx, other.ID, store.TaskClaim{UPID: upid, Node: "pve1", Source: store.UPIDAnswered})
	wantKind(t, err, errs.Conflict, "a second answer with the same UPID")
	_, err = s.CreateTask(ctx, store.Task{UPID: upid, ClusterID: 7, Op: "start", VMID: 100, Status: store.TaskRunning})
	wantKind(t, err, errs.Conflict, "creating a task with a taken UPID")

	unfinished, err := s.UnfinishedTasks(ctx)
	ok(t, err, "unfinished")
	same(t, unfinished, []store.Task{task, other}, "unfinished tasks, oldest first")

	task.Progress = `{"percent":40}`
	task, err = s.UpdateTask(ctx, task)
	ok(t, err, "progress")
	task.Status, task.ExitStatus, task.Error, task.EndedAt = store.TaskStopped, "migration problems", "ERROR: boom", at(time.Minute)
	stopped, err := s.UpdateTask(ctx, task)
	ok(t, err, "stop")
	task.UpdatedAt = stamped(t, stopped, task)
	same(t, stopped, task, "stopped task")
	if !stopped.Finished() {
		t.Fatal("a stopped task is not Finished")
	}

	reopened := stopped
	reopened.Status, reopened.EndedAt = store.TaskRunning, time.Time{}
	_, err = s.UpdateTask(ctx, reopened)
	wantKind(t, err, errs.Conflict, "changing a stopped task")
	got, err = s.TaskByID(ctx, task.ID)
	ok(t, err, "reread")
	same(t, got, stopped, "stopped task after a refused update")

	other.Status, other.Error, other.LostReason = store.TaskLost, "POST failed", store.LostRefused
	lost, err := s.UpdateTask(ctx, other)
	ok(t, err, "lose the other")
	same(t, lost.LostReason, store.LostRefused, "LostReason")
	other.Error = "changed"
	_, err = s.UpdateTask(ctx, other)
	wantKind(t, err, errs.Conflict, "changing a lost task")

	_, err = s.UpdateTask(ctx, store.Task{ID: task.ID + 1000, Status: store.TaskRunning})
	wantKind(t, err, errs.NotFound, "update a missing task")
	_, err = s.TaskByID(ctx, task.ID+1000)
	wantKind(t, err, errs.NotFound, "missing task")
	unfinished, err = s.UnfinishedTasks(ctx)
	ok(t, err, "unfinished")
	same(t, len(unfinished), 0, "unfinished tasks at the end")
}

// stamped checks that an update set UpdatedAt to now (never before the previous
// write) and returns it.
func stamped(t *testing.T, updated, before store.Task) time.Time {
	t.Helper()
	fresh(t, updated.UpdatedAt, "UpdatedAt")
	if updated.UpdatedAt.Before(before.UpdatedAt) {
		t.Fatalf("UpdatedAt went back from %v to %v", before.UpdatedAt, updated.UpdatedAt)
	}
	return updated.UpdatedAt
}

// testTaskOutcome: a row remembers the Idempotency-Key of the request that wrote
// it (the newest row of a key is found by it), when its PVE call's outcome became
// unknown, and ExcludeRefused lists every row but those PVE refused at once.
func testTaskOutcome(t *testing.T, s store.Store) {
	ctx := t.Context()
	first, err := s.CreateTask(ctx, store.Task{ClusterID: 1, UserID: 5, Op: "start", VMID: 100, IdemKey: "k-1"})
	ok(t, err, "create with a key")
	second, err := s.CreateTask(ctx, store.Task{ClusterID: 1, UserID: 5, Op: "start", VMID: 100, IdemKey: "k-1"})
	ok(t, err, "create again with the key")
	_, err = s.CreateTask(ctx, store.Task{ClusterID: 1, UserID: 6, Op: "start", VMID: 100, IdemKey: "k-2"})
	ok(t, err, "another user's key")
	got, err := s.TaskByIdempotencyKey(ctx, 5, "k-1")
	ok(t, err, "task by key")
	same(t, got, second, "the newest row of the key")
	_, err = s.TaskByIdempotencyKey(ctx, 5, "k-2")
	wantKind(t, err, errs.NotFound, "another user's key")
	_, err = s.TaskByIdempotencyKey(ctx, 5, "")
	wantKind(t, err, errs.NotFound, "no key")

	// first: PVE refused it at once (lost). second: its outcome became unknown,
	// then it was given up (lost too). plain: pending.
	first.Status, first.Error = store.TaskLost, "PVE said no"
	_, err = s.UpdateTask(ctx, first)
	ok(t, err, "refused")
	second.OutcomeUnknownAt = at(time.Minute)
	second, err = s.UpdateTask(ctx, second)
	ok(t, err, "outcome unknown")
	same(t, second.OutcomeUnknownAt, at(time.Minute), "OutcomeUnknownAt")
	second.Status = store.TaskLost
	_, err = s.UpdateTask(ctx, second)
	ok(t, err, "given up")
	plain, err := s.CreateTask(ctx, store.Task{ClusterID: 1, UserID: 5, Op: "stop", VMID: 101})
	ok(t, err, "plain")
	list, err := s.ListTasks(ctx, store.TaskFilter{UserID: 5, ExcludeRefused: true})
	ok(t, err, "list without refused")
	var ids []int64
	for _, task := range list {
		ids = append(ids, task.ID)
	}
	same(t, ids, []int64{plain.ID, second.ID}, "listed rows")
}

// testClusterPVEVersion: a cluster keeps the PVE version it was created with;
// SetClusterPVEVersion changes only it and feeds the change, once; UpdateCluster
// leaves it alone.
func testClusterPVEVersion(t *testing.T, s store.Store) {
	ctx := t.Context()
	c, err := s.CreateCluster(ctx, store.Cluster{Name: "versioned", TokenID: "a@pve!b", PVEVersion: "8.3.0",
		Endpoints: []store.Endpoint{{URL: "https://10.0.0.1:8006"}}})
	ok(t, err, "create")
	same(t, c.PVEVersion, "8.3.0", "version at creation")
	before, err := s.Changes(ctx, 0, 1000)
	ok(t, err, "changes")
	ok(t, s.SetClusterPVEVersion(ctx, c.ID, "9.1.5"), "set the version")
	got, err := s.ClusterByID(ctx, c.ID)
	ok(t, err, "read")
	if got.PVEVersion != "9.1.5" || got.Name != c.Name || len(got.Endpoints) != 1 {
		t.Fatalf("after setting the version: %+v", got)
	}
	ok(t, s.SetClusterPVEVersion(ctx, c.ID, "9.1.5"), "set the same version")
	after, err := s.Changes(ctx, 0, 1000)
	ok(t, err, "changes")
	if len(after) != len(before)+1 || after[len(after)-1].Kind != store.ChangeCluster || after[len(after)-1].ClusterID != c.ID {
		t.Fatalf("feed after two sets: %+v (before %d)", after, len(before))
	}
	got.Name = "renamed"
	got.PVEVersion = "1.0"
	updated, err := s.UpdateCluster(ctx, got)
	ok(t, err, "update")
	same(t, updated.PVEVersion, "9.1.5", "version after UpdateCluster")
	wantKind(t, s.SetClusterPVEVersion(ctx, c.ID+1000, "9.1.5"), errs.NotFound, "a missing cluster")
}

func testListTasks(t *testing.T, s store.Store) {
	ctx := t.Context()
	var all []store.Task // oldest first
	for i := range 60 {
		task, err := s.CreateTask(ctx, store.Task{ClusterID: int64(1 + i%3), UserID: int64(1 + i%2),
			Op: "start", VMID: int64(100 + i%4)})
		ok(t, err, "create")
		all = append(all, task)
	}
	newest := slices.Clone(all)
	slices.Reverse(newest)
	pick := func(keep func(store.Task) bool) []store.Task {
		var out []store.Task
		for _, task := range newest {
			if keep(task) {
				out = append(out, task)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.TaskFilter
		want []store.Task
	}{
		{"default limit", store.TaskFilter{}, newest[:50]},
		{"limit", store.TaskFilter{Limit: 3}, newest[:3]},
		{"limit over the maximum", store.TaskFilter{Limit: 100000}, newest},
		{"cluster", store.TaskFilter{ClusterID: 2}, pick(func(t store.Task) bool { return t.ClusterID == 2 })},
		{"clusters", store.TaskFilter{ClusterIDs: []int64{1, 3}}, pick(func(t store.Task) bool { return t.ClusterID != 2 })},
		{"no clusters", store.TaskFilter{ClusterIDs: []int64{}}, nil},
		{"VM", store.TaskFilter{ClusterID: 1, VMID: 103}, pick(func(t store.Task) bool { return t.ClusterID == 1 && t.VMID == 103 })},
		{"user", store.TaskFilter{UserID: 2}, pick(func(t store.Task) bool { return t.UserID == 2 })},
		{"clusters and user", store.TaskFilter{ClusterIDs: []int64{2}, UserID: 1},
			pick(func(t store.Task) bool { return t.ClusterID == 2 && t.UserID == 1 })},
		{"before", store.TaskFilter{BeforeID: all[10].ID}, pick(func(t store.Task) bool { return t.ID < all[10].ID })},
	} {
		got, err := s.ListTasks(ctx, tc.f)
		ok(t, err, tc.name)
		if len(got) == 0 && len(tc.want) == 0 {
			continue
		}
		same(t, got, tc.want, tc.name)
	}

	// Paging with BeforeID visits every task once, newest first.
	var paged []store.Task
	f := store.TaskFilter{ClusterID: 1, Limit: 4}
	for {
		page, err := s.ListTasks(ctx, f)
		ok(t, err, "page")
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		f.BeforeID = page[len(page)-1].ID
	}
	same(t, paged, pick(func(t store.Task) bool { return t.ClusterID == 1 }), "paged tasks")
}

func testAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	recs, err := s.ListAudit(ctx, 10, 0)
	ok(t, err, "audit of an empty store")
	same(t, len(recs), 0, "audit of an empty store")

	full := store.AuditRecord{At: at(0), UserID: 4, UserEmail: "a@example.com", SessionID: "sid", Action: "vm.migrate",
		ClusterID: 2, Node: "pve1", VMID: 100, Target: "pve2", Params: `{"online":true}`, Result: "ok",
		UPID: "UPID:pve1:1:2:3:qmigrate:100:x:", Address: "192.0.2.7", RequestID: "req-1"}
	first, err := s.AppendAudit(ctx, full)
	ok(t, err, "append")
	full.ID, full.Count, full.Chain = first.ID, 1, store.AuditChainValue(store.AuditRecord{ID: first.ID, At: full.At,
		UserID: 4, UserEmail: "a@example.com", SessionID: "sid", Action: "vm.migrate", ClusterID: 2, Node: "pve1",
		VMID: 100, Target: "pve2", Params: `{"online":true}`, Result: "ok", UPID: "UPID:pve1:1:2:3:qmigrate:100:x:",
		Address: "192.0.2.7", RequestID: "req-1", Count: 1})
	same(t, first, full, "appended record")

	var all []store.AuditRecord // newest first
	all = append(all, first)
	for i := range 6 {
		rec, err := s.AppendAudit(ctx, store.AuditRecord{Action: "auth.login_failed", Result: "denied", Target: fmt.Sprint(i)})
		ok(t, err, "append")
		fresh(t, rec.At, "At of a record without one")
		all = slices.Insert(all, 0, rec)
	}
	recs, err = s.ListAudit(ctx, 3, 0)
	ok(t, err, "newest three")
	same(t, recs, all[:3], "newest three")
	recs, err = s.ListAudit(ctx, 3, recs[2].ID)
	ok(t, err, "next three")
	same(t, recs, all[3:6], "next three")
	recs, err = s.ListAudit(ctx, 3, recs[2].ID)
	ok(t, err, "last page")
	same(t, recs, all[6:], "last page")
	recs, err = s.ListAudit(ctx, 0, 0)
	ok(t, err, "default limit")
	same(t, recs, all, "default limit")
}

func testIdempotency(t *testing.T, s store.Store) {
	ctx := t.Context()
	u, v := mkUser(t, s, "i@example.com"), mkUser(t, s, "j@example.com")
	claim := store.IdempotencyRecord{UserID: u.ID, Key: "k1", RequestHash: "h1", State: store.IdemInProgress,
		CreatedAt: at(0), ExpiresAt: at(time.Hour), LeaseExpiresAt: at(store.IdempotencyLease)}

	got, claimed, err := s.ClaimIdempotencyKey(ctx, claim)
	ok(t, err, "claim")
	if !claimed {
		t.Fatal("first claim lost")
	}
	same(t, got, claim, "claimed record")
	held, claimed, err := s.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: u.ID, Key: "k1", RequestHash: "h2",
		State: store.IdemInProgress, CreatedAt: at(time.Minute), ExpiresAt: at(time.Hour + time.Minute)})
	ok(t, err, "second claim")
	if claimed {
		t.Fatal("second claim of a held key won")
	}
	same(t, held, claim, "record held by the first claim")
	_, claimed, err = s.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: v.ID, Key: "k1", RequestHash: "h1",
		State: store.IdemInProgress, CreatedAt: at(0), ExpiresAt: at(time.Hour)})
	ok(t, err, "another user's claim")
	if !claimed {
		t.Fatal("keys are not per user")
	}

	done := claim
	done.State, done.StatusCode, done.Headers, done.Body = store.IdemDone, 202, `{"X-Task-Id":"UPID:x"}`, []byte(`{"code":202}`)
	ok(t, s.CompleteIdempotencyKey(ctx, done), "complete")
	replay, claimed, err := s.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: u.ID, Key: "k1", RequestHash: "h1",
		State: store.IdemInProgress, CreatedAt: at(2 * time.Minute), ExpiresAt: at(2 * time.Hour)})
	ok(t, err, "claim a done key")
	if claimed {
		t.Fatal("claim of a done key won")
	}
	same(t, replay, done, "replayed record")
	wantKind(t, s.CompleteIdempotencyKey(ctx, done), errs.Conflict, "complete twice")
	wantKind(t, s.ReleaseIdempotencyKey(ctx, u.ID, "k1", ""), errs.Conflict, "release a done key")
	wantKind(t, s.ReleaseIdempotencyKey(ctx, u.ID, "nope", ""), errs.NotFound, "release a missing key")
	missing := done
	missing.Key = "nope"
	wantKind(t, s.CompleteIdempotencyKey(ctx, missing), errs.NotFound, "complete a missing key")

	// A released key may be claimed again at once.
	ok(t, s.ReleaseIdempotencyKey(ctx, v.ID, "k1", ""), "release")
	again := store.IdempotencyRecord{UserID: v.ID, Key: "k1", RequestHash: "h3", State: store.IdemInProgress,
		CreatedAt: at(time.Minute), ExpiresAt: at(time.Hour), Owner: "replica-b", LeaseExpiresAt: at(2 * time.Minute)}
	got, claimed, err = s.ClaimIdempotencyKey(ctx, again)
	ok(t, err, "claim after release")
	if !claimed {
		t.Fatal("claim after release lost")
	}
	same(t, got, again, "record claimed after release")

	// An expired record, done or not, is replaced by the next claim.
	renewed := store.IdempotencyRecord{UserID: u.ID, Key: "k1", RequestHash: "h4", State: store.IdemInProgress,
		CreatedAt: at(time.Hour), ExpiresAt: at(2 * time.Hour), LeaseExpiresAt: at(time.Hour + store.IdempotencyLease)}
	got, claimed, err = s.ClaimIdempotencyKey(ctx, renewed)
	ok(t, err, "claim an expired key")
	if !claimed {
		t.Fatal("claim of an expired key lost")
	}
	same(t, got, renewed, "record replacing an expired one")

	// Defaults: State in progress, ExpiresAt a day after CreatedAt, the lease
	// IdempotencyLease.
	got, claimed, err = s.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: u.ID, Key: "k2", RequestHash: "h", CreatedAt: at(0)})
	ok(t, err, "claim with defaults")
	if !claimed || got.State != store.IdemInProgress || !got.ExpiresAt.After(at(time.Hour)) ||
		!got.LeaseExpiresAt.Equal(at(store.IdempotencyLease)) || got.Owner != "" {
		t.Fatalf("claim with defaults: %v %+v", claimed, got)
	}
}

// testIdempotencyLease follows a key's lease: its owner extends it, nobody takes it
// over while it is live, anybody may once it ran out, and then the old owner can
// neither extend, complete nor release it, while the new one can.
func testIdempotencyLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "lease@example.com")
	claim := store.IdempotencyRecord{UserID: u.ID, Key: "k", RequestHash: "h", CreatedAt: at(0), ExpiresAt: at(time.Hour),
		Owner: "a", LeaseExpiresAt: at(30 * time.Second)}
	_, claimed, err := s.ClaimIdempotencyKey(ctx, claim)
	ok(t, err, "claim")
	if !claimed {
		t.Fatal("claim lost")
	}
	held, claimed, err := s.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: u.ID, Key: "k", RequestHash: "h",
		CreatedAt: at(10 * time.Second), Owner: "b"})
	ok(t, err, "second claim")
	if claimed || held.Owner != "a" || !held.LeaseExpiresAt.Equal(at(30*time.Second)) {
		t.Fatalf("a second claim: won %v, record %+v; want the holder a and its lease", claimed, held)
	}

	ok(t, s.HeartbeatIdempotencyKey(ctx, u.ID, "k", "a", at(40*time.Second)), "heartbeat")
	ok(t, s.HeartbeatIdempotencyKey(ctx, u.ID, "k", "a", at(35*time.Second)), "a late heartbeat")
	wantKind(t, s.HeartbeatIdempotencyKey(ctx, u.ID, "k", "b", at(time.Hour)), errs.Conflict, "heartbeat by another owner")
	wantKind(t, s.HeartbeatIdempotencyKey(ctx, u.ID, "nope", "a", at(time.Hour)), errs.NotFound, "heartbeat of a missing key")

	// The lease (40 s, the late heartbeat did not shorten it) is live at 39 s.
	rec, taken, err := s.TakeOverIdempotencyKey(ctx, u.ID, "k", "b", at(39*time.Second), at(69*time.Second))
	ok(t, err, "take over a live lease")
	if taken || rec.Owner != "a" || !rec.LeaseExpiresAt.Equal(at(40*time.Second)) {
		t.Fatalf("take over a live lease: taken %v, record %+v", taken, rec)
	}
	expired, err := s.ExpiredIdempotencyLeases(ctx, at(39*time.Second), 10)
	ok(t, err, "expired leases at 39 s")
	same(t, len(expired), 0, "expired leases while live")
	expired, err = s.ExpiredIdempotencyLeases(ctx, at(40*time.Second), 10)
	ok(t, err, "expired leases at 40 s")
	if len(expired) != 1 || expired[0].Key != "k" || expired[0].Owner != "a" {
		t.Fatalf("expired leases at 40 s: %+v", expired)
	}

	// At 40 s it ran out: b takes it over.
	rec, taken, err = s.TakeOverIdempotencyKey(ctx, u.ID, "k", "b", at(40*time.Second), at(70*time.Second))
	ok(t, err, "take over an expired lease")
	want := claim
	want.Owner, want.LeaseExpiresAt, want.State = "b", at(70*time.Second), store.IdemInProgress
	if !taken {
		t.Fatalf("take over an expired lease lost: %+v", rec)
	}
	same(t, rec, want, "record taken over")
	_, taken, err = s.TakeOverIdempotencyKey(ctx, u.ID, "k", "c", at(41*time.Second), at(71*time.Second))
	ok(t, err, "take over again")
	if taken {
		t.Fatal("a lease just taken over was taken over again")
	}

	// a lost it.
	wantKind(t, s.HeartbeatIdempotencyKey(ctx, u.ID, "k", "a", at(time.Hour)), errs.Conflict, "heartbeat by the old owner")
	done := want
	done.Owner, done.State, done.StatusCode, done.Body = "a", store.IdemDone, 202, []byte("{}")
	wantKind(t, s.CompleteIdempotencyKey(ctx, done), errs.Conflict, "complete by the old owner")
	wantKind(t, s.ReleaseIdempotencyKey(ctx, u.ID, "k", "a"), errs.Conflict, "release by the old owner")

	// b resolves it.
	ok(t, s.HeartbeatIdempotencyKey(ctx, u.ID, "k", "b", at(80*time.Second)), "heartbeat by the new owner")
	done.Owner = "b"
	ok(t, s.CompleteIdempotencyKey(ctx, done), "complete by the new owner")
	rec, taken, err = s.TakeOverIdempotencyKey(ctx, u.ID, "k", "c", at(time.Hour), at(2*time.Hour))
	ok(t, err, "take over a done key")
	if taken || rec.State != store.IdemDone || rec.StatusCode != 202 {
		t.Fatalf("take over a done key: taken %v, record %+v", taken, rec)
	}
	wantKind(t, s.HeartbeatIdempotencyKey(ctx, u.ID, "k", "b", at(time.Hour)), errs.Conflict, "heartbeat of a done key")
	_, _, err = s.TakeOverIdempotencyKey(ctx, u.ID, "nope", "c", at(time.Hour), at(2*time.Hour))
	wantKind(t, err, errs.NotFound, "take over a missing key")
	expired, err = s.ExpiredIdempotencyLeases(ctx, at(time.Hour), 10)
	ok(t, err, "expired leases at the end")
	same(t, len(expired), 0, "expired leases of done keys")
}

// testIdempotencyTakeOverRace: of several replicas taking over one expired lease at
// once, exactly one wins, and every loser sees the winner as the owner.
func testIdempotencyTakeOverRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "takeover@example.com")
	_, claimed, err := s.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: u.ID, Key: "k", RequestHash: "h",
		CreatedAt: at(0), Owner: "dead"})
	ok(t, err, "claim")
	if !claimed {
		t.Fatal("claim lost")
	}
	const n = 20
	var (
		taken  = make([]bool, n)
		owners = make([]string, n)
	)
	race(t, s, n, func(i int) {
		rec, won, err := s.TakeOverIdempotencyKey(ctx, u.ID, "k", fmt.Sprint("r", i), at(time.Minute), at(2*time.Minute))
		if err != nil {
			t.Errorf("take over %d: %v", i, err)
		}
		taken[i], owners[i] = won, rec.Owner
	})
	if t.Failed() {
		t.FailNow()
	}
	winner := oneWinner(t, taken, "take-over")
	for i := range n {
		same(t, owners[i], fmt.Sprint("r", winner), fmt.Sprintf("owner seen by take-over %d", i))
	}
}

func testIdempotencyRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "race@example.com")
	const n = 50
	var (
		claimed = make([]bool, n)
		hashes  = make([]string, n)
	)
	race(t, s, n, func(i int) {
		r, c, err := s.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: u.ID, Key: "same",
			RequestHash: fmt.Sprint("h", i), CreatedAt: at(0), ExpiresAt: at(time.Hour)})
		if err != nil {
			t.Errorf("claim %d: %v", i, err)
		}
		claimed[i], hashes[i] = c, r.RequestHash
	})
	if t.Failed() {
		t.FailNow()
	}
	winner := oneWinner(t, claimed, "claim")
	for i := range n {
		same(t, hashes[i], fmt.Sprint("h", winner), fmt.Sprintf("record seen by claim %d", i))
	}
}

// pruneNow is when the Prune tests prune: a month after base, so the defaults
// (a day for the feed, a week for sessions) fall well after everything set at base.
var pruneNow = at(30 * 24 * time.Hour)

func ago(d time.Duration) time.Time { return pruneNow.Add(-d) }

// wantSessions fails t unless exactly the sessions of ids among all exist.
func wantSessions(t *testing.T, s store.Store, all, ids []string, what string) {
	t.Helper()
	for _, id := range all {
		_, err := s.SessionByID(t.Context(), id)
		switch {
		case slices.Contains(ids, id):
			ok(t, err, fmt.Sprintf("%s: session %s", what, id))
		default:
			wantKind(t, err, errs.NotFound, fmt.Sprintf("%s: pruned session %s", what, id))
		}
	}
}

// feedHead returns the Seq of the newest feed entry, 0 when there is none.
func feedHead(t *testing.T, s store.Store) int64 {
	t.Helper()
	var head int64
	for {
		cs, err := s.Changes(t.Context(), head, 1000)
		ok(t, err, "read the feed")
		if len(cs) == 0 {
			return head
		}
		head = cs[len(cs)-1].Seq
	}
}

// sessionFeed returns the session entries of the feed after after, oldest first.
func sessionFeed(t *testing.T, s store.Store, after int64) []store.Change {
	t.Helper()
	cs, err := s.Changes(t.Context(), after, 1000)
	ok(t, err, "read the feed")
	out := []store.Change{}
	for _, c := range cs {
		if c.Kind == store.ChangeSession {
			out = append(out, c)
		}
	}
	return out
}

// feedIDs returns the session IDs of the whole feed, oldest first.
func feedIDs(t *testing.T, s store.Store) []string {
	t.Helper()
	ids := []string{}
	for _, c := range sessionFeed(t, s, 0) {
		ids = append(ids, c.SessionID)
	}
	return ids
}

// mkEndedSessions creates sessions prefix0..prefix(n-1), revoked at revoked, so the
// feed gains one entry for each changed at revoked.
func mkEndedSessions(t *testing.T, s store.Store, userID int64, prefix string, n int, revoked time.Time) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprint(prefix, i)
		mkSession(t, s, id, userID, pruneNow.Add(time.Hour))
		ok(t, s.RevokeSession(t.Context(), id, revoked, "logout"), "revoke "+id)
		ids = append(ids, id)
	}
	return ids
}

// mkIdemKeys claims keys prefix0..prefix(n-1) that expire at expires.
func mkIdemKeys(t *testing.T, s store.Store, userID int64, prefix string, n int, expires time.Time) {
	t.Helper()
	for i := range n {
		_, claimed, err := s.ClaimIdempotencyKey(t.Context(), store.IdempotencyRecord{UserID: userID,
			Key: fmt.Sprint(prefix, i), RequestHash: "h", CreatedAt: base, ExpiresAt: expires})
		ok(t, err, "claim "+fmt.Sprint(prefix, i))
		if !claimed {
			t.Fatalf("claim %s%d lost", prefix, i)
		}
	}
}

// wantIdemKeys fails t unless each key of keys is held (held) or gone (!held).
func wantIdemKeys(t *testing.T, s store.Store, userID int64, held bool, keys ...string) {
	t.Helper()
	for _, key := range keys {
		// A claim at base cannot replace even an expired key, as base is before
		// every ExpiresAt here: it wins exactly when the key is gone.
		_, claimed, err := s.ClaimIdempotencyKey(t.Context(), store.IdempotencyRecord{UserID: userID, Key: key,
			RequestHash: "probe", CreatedAt: base, ExpiresAt: base.Add(time.Millisecond)})
		ok(t, err, "probe idempotency key "+key)
		if claimed == held {
			t.Fatalf("idempotency key %s: held %v, want %v", key, !claimed, held)
		}
		if claimed {
			ok(t, s.ReleaseIdempotencyKey(t.Context(), userID, key, ""), "release probe "+key)
		}
	}
}

// testPrune prunes with the default options: what ended long enough ago goes, what
// is recent or live stays, and the feed stays whole after the oldest entry kept.
func testPrune(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "prune@example.com")

	mkSession(t, s, "expired-long", u.ID, ago(8*24*time.Hour))
	mkSession(t, s, "expired-recent", u.ID, ago(24*time.Hour))
	mkSession(t, s, "active", u.ID, pruneNow.Add(time.Hour))
	for _, id := range []string{"revoked-long", "revoked-recent", "revoked-fresh", "revoked-skewed"} {
		mkSession(t, s, id, u.ID, pruneNow.Add(time.Hour))
	}
	// The feed, oldest first, with when each changed. revoked-skewed comes after a
	// fresh entry but carries an old time, as a replica with a slow clock writes.
	ok(t, s.RevokeSession(ctx, "revoked-long", ago(8*24*time.Hour), "logout"), "revoke")   // old
	ok(t, s.RevokeSession(ctx, "revoked-recent", ago(2*24*time.Hour), "logout"), "revoke") // old
	_, _, err := s.RotateSession(ctx, "active", 1, ago(25*time.Hour))                      // old
	ok(t, err, "rotate")
	ok(t, s.RevokeSession(ctx, "revoked-fresh", ago(time.Hour), "logout"), "revoke")       // fresh
	ok(t, s.RevokeSession(ctx, "revoked-skewed", ago(3*24*time.Hour), "logout"), "revoke") // old, after a fresh one
	_, _, err = s.RotateSession(ctx, "active", 2, ago(time.Minute))                        // fresh
	ok(t, err, "rotate")
	before := sessionFeed(t, s, 0)
	same(t, len(before), 6, "feed entries before pruning")

	mkIdemKeys(t, s, u.ID, "expired", 1, pruneNow.Add(-time.Millisecond))
	mkIdemKeys(t, s, u.ID, "at-now", 1, pruneNow)
	mkIdemKeys(t, s, u.ID, "live", 1, pruneNow.Add(time.Millisecond))

	res, err := s.Prune(ctx, pruneNow, store.PruneOptions{})
	ok(t, err, "prune")
	// The feed's oldest entries: the user's creation (at the real now, long
	// before base) and the three old session changes.
	same(t, res, store.PruneResult{Changes: 4, Sessions: 2, IdempotencyKeys: 2}, "pruned")

	wantSessions(t, s, []string{"expired-long", "expired-recent", "active", "revoked-long", "revoked-recent",
		"revoked-fresh", "revoked-skewed"}, []string{"expired-recent", "active", "revoked-recent", "revoked-fresh",
		"revoked-skewed"}, "after pruning")
	wantIdemKeys(t, s, u.ID, false, "expired0", "at-now0")
	wantIdemKeys(t, s, u.ID, true, "live0")

	// Everything from the first fresh entry on stays, with its Seq, in order: a
	// poller at any Seq from there on reads exactly what it read before.
	all, err := s.Changes(ctx, 0, 100)
	ok(t, err, "feed after pruning")
	same(t, all, before[3:], "feed after pruning")
	for i := 2; i < len(before); i++ {
		page, err := s.Changes(ctx, before[i].Seq, 100)
		ok(t, err, "poll after pruning")
		same(t, page, before[i+1:], fmt.Sprintf("changes after seq %d", before[i].Seq))
	}
	// New changes follow the ones kept.
	ok(t, s.RevokeSession(ctx, "active", pruneNow, "logout"), "revoke after pruning")
	page, err := s.Changes(ctx, before[5].Seq, 100)
	ok(t, err, "poll a change after pruning")
	if len(page) != 1 || page[0].SessionID != "active" || page[0].Seq <= before[5].Seq {
		t.Fatalf("change after pruning: %+v after %+v", page, before[5])
	}

	res, err = s.Prune(ctx, pruneNow, store.PruneOptions{})
	ok(t, err, "prune again")
	same(t, res, store.PruneResult{}, "pruned by a second run")

	// Shorter options take effect: half a minute for the feed, two hours for sessions.
	res, err = s.Prune(ctx, pruneNow, store.PruneOptions{ChangesOlderThan: time.Minute / 2, SessionsEndedBefore: 2 * time.Hour})
	ok(t, err, "prune with short options")
	same(t, res, store.PruneResult{Changes: 3, Sessions: 3}, "pruned with short options")
	wantSessions(t, s, []string{"expired-recent", "active", "revoked-recent", "revoked-fresh", "revoked-skewed"},
		[]string{"active", "revoked-fresh"}, "after pruning with short options")
	same(t, feedIDs(t, s), []string{"active"}, "feed after pruning with short options")
}

// testPruneKeepsNewestChange prunes a feed whose every entry is old: the newest
// stays, so the feed never empties, and later changes come after it.
func testPruneKeepsNewestChange(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "newest@example.com")
	mkEndedSessions(t, s, u.ID, "n", 3, base)
	before := sessionFeed(t, s, 0)

	for range 2 {
		res, err := s.Prune(ctx, pruneNow, store.PruneOptions{SessionsEndedBefore: 365 * 24 * time.Hour})
		ok(t, err, "prune")
		if res.Changes > 3 || res.Sessions != 0 { // the user's creation and two sessions
			t.Fatalf("pruned %+v", res)
		}
		after, err := s.Changes(ctx, 0, 100)
		ok(t, err, "feed after pruning")
		same(t, after, before[2:], "feed after pruning every old entry")
	}

	mkEndedSessions(t, s, u.ID, "later", 1, pruneNow)
	page, err := s.Changes(ctx, before[2].Seq, 100)
	ok(t, err, "poll")
	if len(page) != 1 || page[0].SessionID != "later0" || page[0].Seq <= before[2].Seq {
		t.Fatalf("change after pruning: %+v after %+v", page, before[2])
	}
}

// testPruneBatches prunes backlogs of exactly, more and fewer rows than a batch.
func testPruneBatches(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "batch@example.com")
	for round, batch := range []int{2, 1, 5, 6, 1000} {
		prefix := fmt.Sprintf("b%d-", round)
		ended := mkEndedSessions(t, s, u.ID, prefix, 5, base)
		mkIdemKeys(t, s, u.ID, prefix, 5, base.Add(time.Hour))
		// Five old entries, and the newest stays until the next round adds newer;
		// the first round also prunes the user's creation.
		wantChanges := int64(5)
		res, err := s.Prune(ctx, pruneNow, store.PruneOptions{Batch: batch})
		ok(t, err, fmt.Sprintf("prune in batches of %d", batch))
		same(t, res, store.PruneResult{Changes: wantChanges, Sessions: 5, IdempotencyKeys: 5},
			fmt.Sprintf("pruned in batches of %d", batch))
		wantSessions(t, s, ended, nil, fmt.Sprintf("batches of %d", batch))
		same(t, feedIDs(t, s), ended[4:], fmt.Sprintf("feed after batches of %d", batch))
	}
}

// testPruneRace runs prunes on several replicas at once: none fails, no row is
// counted twice, and what a racing prune left goes with the next.
func testPruneRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "prunerace@example.com")
	ended := mkEndedSessions(t, s, u.ID, "r", 20, base)
	mkIdemKeys(t, s, u.ID, "r", 20, base.Add(time.Hour))

	const n = 4
	results := make([]store.PruneResult, n+1)
	race(t, s, n, func(i int) {
		var err error
		results[i], err = s.Prune(ctx, pruneNow, store.PruneOptions{Batch: 3})
		if err != nil {
			t.Errorf("prune %d: %v", i, err)
		}
	})
	var err error
	results[n], err = s.Prune(ctx, pruneNow, store.PruneOptions{Batch: 3})
	ok(t, err, "prune after the race")
	var total store.PruneResult
	for _, r := range results {
		total.Changes += r.Changes
		total.Sessions += r.Sessions
		total.IdempotencyKeys += r.IdempotencyKeys
	}
	// The user's creation and all session changes but the newest.
	same(t, total, store.PruneResult{Changes: 20, Sessions: 20, IdempotencyKeys: 20}, "pruned by all")
	wantSessions(t, s, ended, nil, "after racing prunes")
	same(t, feedIDs(t, s), ended[19:], "feed after racing prunes")
}
