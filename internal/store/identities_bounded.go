package store

import (
	"context"
	"time"
)

// The bounded store is Identities too: each call gets the store's deadline and its
// failures the store's classification, like every method of Store (bounded.go).

var _ Identities = (*bounded)(nil)

// IdentityFor implements Identities.
func (b *bounded) IdentityFor(ctx context.Context, issuer, subject string) (Identity, error) {
	return call(b, ctx, func(ctx context.Context) (Identity, error) { return b.s.IdentityFor(ctx, issuer, subject) })
}

// UserIdentities implements Identities.
func (b *bounded) UserIdentities(ctx context.Context, userID int64) ([]Identity, error) {
	return call(b, ctx, func(ctx context.Context) ([]Identity, error) { return b.s.UserIdentities(ctx, userID) })
}

// CreateIdentityUser implements Identities.
func (b *bounded) CreateIdentityUser(ctx context.Context, u User, id Identity) (User, error) {
	return call(b, ctx, func(ctx context.Context) (User, error) { return b.s.CreateIdentityUser(ctx, u, id) })
}

// NoteIdentityLogin implements Identities.
func (b *bounded) NoteIdentityLogin(ctx context.Context, id Identity) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.NoteIdentityLogin(ctx, id) })
}

// SyncMappedGrants implements Identities.
func (b *bounded) SyncMappedGrants(ctx context.Context, userID int64, want []MappedGrant) ([]GrantChange, error) {
	return call(b, ctx, func(ctx context.Context) ([]GrantChange, error) { return b.s.SyncMappedGrants(ctx, userID, want) })
}

// GroupMappings implements Identities.
func (b *bounded) GroupMappings(ctx context.Context) ([]GroupMapping, error) {
	return call(b, ctx, b.s.GroupMappings)
}

// GroupMapping implements Identities.
func (b *bounded) GroupMapping(ctx context.Context, id int64) (GroupMapping, error) {
	return call(b, ctx, func(ctx context.Context) (GroupMapping, error) { return b.s.GroupMapping(ctx, id) })
}

// CreateGroupMapping implements Identities.
func (b *bounded) CreateGroupMapping(ctx context.Context, m GroupMapping) (GroupMapping, error) {
	return call(b, ctx, func(ctx context.Context) (GroupMapping, error) { return b.s.CreateGroupMapping(ctx, m) })
}

// UpdateGroupMapping implements Identities.
func (b *bounded) UpdateGroupMapping(ctx context.Context, m GroupMapping) (GroupMapping, error) {
	return call(b, ctx, func(ctx context.Context) (GroupMapping, error) { return b.s.UpdateGroupMapping(ctx, m) })
}

// DeleteGroupMapping implements Identities.
func (b *bounded) DeleteGroupMapping(ctx context.Context, id int64) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.DeleteGroupMapping(ctx, id) })
}

// CreateOIDCLogin implements Identities.
func (b *bounded) CreateOIDCLogin(ctx context.Context, l OIDCLogin, now time.Time, max int) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.CreateOIDCLogin(ctx, l, now, max) })
}

// TakeOIDCLogin implements Identities.
func (b *bounded) TakeOIDCLogin(ctx context.Context, stateHash string, now time.Time) (OIDCLogin, error) {
	return call(b, ctx, func(ctx context.Context) (OIDCLogin, error) { return b.s.TakeOIDCLogin(ctx, stateHash, now) })
}

// CreateOIDCHandoff implements Identities.
func (b *bounded) CreateOIDCHandoff(ctx context.Context, h OIDCHandoff, now time.Time) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.CreateOIDCHandoff(ctx, h, now) })
}

// TakeOIDCHandoff implements Identities.
func (b *bounded) TakeOIDCHandoff(ctx context.Context, codeHash string, now time.Time) (OIDCHandoff, error) {
	return call(b, ctx, func(ctx context.Context) (OIDCHandoff, error) { return b.s.TakeOIDCHandoff(ctx, codeHash, now) })
}
