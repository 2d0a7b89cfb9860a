package storetest

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// testAPITokens: API tokens are found by the hash of their secret alone, listed
// per user newest first, unique by id, hash and (user, name); a deletion by
// anyone but the owner is NotFound and the owner's feeds ChangeAPIToken; uses
// move LastUsedAt forward only and feed nothing; tokens go with their user, and
// Prune removes those long expired.
func testAPITokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "tok@example.com")
	other := mkUser(t, s, "tok-other@example.com")
	hash := func(secret string) []byte { h := sha256.Sum256([]byte(secret)); return h[:] }

	a, err := s.CreateAPIToken(ctx, store.APIToken{ID: "ta", UserID: u.ID, Name: "backup", SecretHash: hash("a"),
		CreatedAt: at(0), ExpiresAt: at(90 * 24 * time.Hour)})
	ok(t, err, "create a")
	if a.Grants != nil || !a.LastUsedAt.IsZero() || a.LastUsedFrom != "" || !a.CreatedAt.Equal(at(0)) {
		t.Fatalf("created a: %+v", a)
	}
	grants := []store.APITokenGrant{{ClusterID: 1, Role: store.GrantViewer}, {ClusterID: 7, Role: store.GrantOperator}}
	_, err = s.CreateAPIToken(ctx, store.APIToken{ID: "tb", UserID: u.ID, Name: "ci", SecretHash: hash("b"),
		Grants: grants, CreatedAt: at(time.Minute), ExpiresAt: at(time.Hour)})
	ok(t, err, "create b")
	_, err = s.CreateAPIToken(ctx, store.APIToken{ID: "tc", UserID: other.ID, Name: "backup", SecretHash: hash("c"),
		CreatedAt: at(0), ExpiresAt: at(time.Hour)})
	ok(t, err, "another user's token of the same name")

	for name, dup := range map[string]store.APIToken{
		"id":   {ID: "ta", UserID: u.ID, Name: "x", SecretHash: hash("x"), ExpiresAt: at(time.Hour)},
		"hash": {ID: "tx", UserID: u.ID, Name: "x", SecretHash: hash("a"), ExpiresAt: at(time.Hour)},
		"name": {ID: "tx", UserID: u.ID, Name: "backup", SecretHash: hash("x"), ExpiresAt: at(time.Hour)},
	} {
		_, err := s.CreateAPIToken(ctx, dup)
		wantKind(t, err, errs.Conflict, "duplicate "+name)
	}
	_, err = s.CreateAPIToken(ctx, store.APIToken{ID: "tz", UserID: other.ID + 1000, Name: "z", SecretHash: hash("z"),
		ExpiresAt: at(time.Hour)})
	wantKind(t, err, errs.NotFound, "token of a missing user")

	b, err := s.APITokenByHash(ctx, hash("b"))
	ok(t, err, "b by hash")
	same(t, b.Grants, grants, "b's grants")
	same(t, b.ID, "tb", "b's id")
	same(t, b.ExpiresAt, at(time.Hour), "b's end")
	_, err = s.APITokenByHash(ctx, hash("nope"))
	wantKind(t, err, errs.NotFound, "unknown hash")

	list, err := s.UserAPITokens(ctx, u.ID)
	ok(t, err, "list")
	same(t, []string{list[0].ID, list[1].ID}, []string{"tb", "ta"}, "the user's tokens, newest first")
	none, err := s.UserAPITokens(ctx, other.ID+1000)
	ok(t, err, "tokens of nobody")
	same(t, len(none), 0, "tokens of nobody")

	head := feedHead(t, s)
	ok(t, s.TouchAPITokens(ctx, []store.APITokenUse{{ID: "ta", At: at(2 * time.Hour), From: "192.0.2.7"},
		{ID: "missing", At: at(time.Hour)}}), "touch")
	ok(t, s.TouchAPITokens(ctx, []store.APITokenUse{{ID: "ta", At: at(time.Hour), From: "192.0.2.8"}}), "touch back in time")
	ok(t, s.TouchAPITokens(ctx, nil), "touch nothing")
	a, err = s.APITokenByHash(ctx, hash("a"))
	ok(t, err, "a by hash")
	same(t, a.LastUsedAt, at(2*time.Hour), "a's last use never moves back")
	same(t, a.LastUsedFrom, "192.0.2.7", "a's last use's address")
	same(t, feedHead(t, s), head, "feed head after touches")

	wantKind(t, s.DeleteAPIToken(ctx, other.ID, "ta"), errs.NotFound, "delete another user's token")
	same(t, feedHead(t, s), head, "feed head after a refused delete")
	ok(t, s.DeleteAPIToken(ctx, u.ID, "ta"), "delete a")
	cs, err := s.Changes(ctx, head, 10)
	ok(t, err, "feed after delete")
	if len(cs) != 1 || cs[0].Kind != store.ChangeAPIToken || cs[0].UserID != u.ID {
		t.Fatalf("feed after delete: %+v", cs)
	}
	_, err = s.APITokenByHash(ctx, hash("a"))
	wantKind(t, err, errs.NotFound, "deleted token by hash")
	wantKind(t, s.DeleteAPIToken(ctx, u.ID, "ta"), errs.NotFound, "delete again")

	// b expired at +1h: pruned once it is SessionsEndedBefore past that.
	res, err := s.Prune(ctx, at(2*time.Hour), store.PruneOptions{SessionsEndedBefore: 2 * time.Hour})
	ok(t, err, "prune too early")
	same(t, res.APITokens, int64(0), "tokens pruned too early")
	res, err = s.Prune(ctx, at(4*time.Hour), store.PruneOptions{SessionsEndedBefore: 2 * time.Hour})
	ok(t, err, "prune")
	same(t, res.APITokens, int64(2), "expired tokens pruned (b and other's c)")
	_, err = s.APITokenByHash(ctx, hash("b"))
	wantKind(t, err, errs.NotFound, "pruned token")

	_, err = s.CreateAPIToken(ctx, store.APIToken{ID: "td", UserID: other.ID, Name: "d", SecretHash: hash("d"),
		ExpiresAt: at(time.Hour)})
	ok(t, err, "create d")
	ok(t, s.DeleteUser(ctx, other.ID), "delete its user")
	_, err = s.APITokenByHash(ctx, hash("d"))
	wantKind(t, err, errs.NotFound, "a deleted user's token")
}
