package auth

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// The API token methods of fakeStore, with store.go's semantics: a token of a
// deleted user is gone (the real store cascades), a deletion feeds ChangeAPIToken.

func (f *fakeStore) CreateAPIToken(_ context.Context, t store.APIToken) (store.APIToken, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.users[t.UserID]; !ok {
		return store.APIToken{}, notFound("user")
	}
	for _, o := range f.tokens {
		if o.ID == t.ID || bytes.Equal(o.SecretHash, t.SecretHash) || (o.UserID == t.UserID && o.Name == t.Name) {
			return store.APIToken{}, errs.E(errs.Conflict, "token exists")
		}
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	t.CreatedAt, t.ExpiresAt = t.CreatedAt.UTC().Truncate(time.Millisecond), t.ExpiresAt.UTC().Truncate(time.Millisecond)
	f.tokens[t.ID] = t
	return t, nil
}

func (f *fakeStore) APITokenByHash(_ context.Context, hash []byte) (store.APIToken, error) {
	if err := f.unavailable(); err != nil {
		return store.APIToken{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.tokens {
		if _, owner := f.users[t.UserID]; owner && bytes.Equal(t.SecretHash, hash) {
			return t, nil
		}
	}
	return store.APIToken{}, notFound("api token")
}

func (f *fakeStore) UserAPITokens(_ context.Context, userID int64) ([]store.APIToken, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []store.APIToken{}
	for _, t := range f.tokens {
		if t.UserID == userID {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b store.APIToken) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

func (f *fakeStore) DeleteAPIToken(_ context.Context, userID int64, id string) error {
	defer f.publish()
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tokens[id]
	if !ok || t.UserID != userID {
		return notFound("api token")
	}
	delete(f.tokens, id)
	f.feedChange(store.Change{Kind: store.ChangeAPIToken, UserID: userID})
	return nil
}

func (f *fakeStore) TouchAPITokens(_ context.Context, uses []store.APITokenUse) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range uses {
		if t, ok := f.tokens[u.ID]; ok && t.LastUsedAt.Before(u.At) {
			t.LastUsedAt, t.LastUsedFrom = u.At.UTC(), u.From
			f.tokens[u.ID] = t
		}
	}
	return nil
}
