package identity

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// userOf finds the user of the identity (issuer, subject) in c, creating it at
// its first login without a password, then applies the group mappings to the
// login's groups. The user is never found by e-mail: the same e-mail at another
// issuer, or a password user's, is another user (docs/decisions/0109).
func (s *Service) userOf(ctx context.Context, c claims) (store.User, error) {
	id, err := s.cfg.Store.IdentityFor(ctx, c.Issuer, c.Subject)
	var u store.User
	switch {
	case err == nil:
		if u, err = s.cfg.Store.UserByID(ctx, id.UserID); err != nil {
			return store.User{}, fmt.Errorf("single sign-on: user of identity: %w", err)
		}
	case errs.Is(err, errs.NotFound):
		if u, id, err = s.createUser(ctx, c); err != nil {
			return store.User{}, err
		}
	default:
		return store.User{}, fmt.Errorf("single sign-on: read identity: %w", err)
	}
	if u.Disabled {
		return u, nil // refused by the caller; nothing of a disabled user changes
	}
	return s.applyMappings(ctx, u, id, c)
}

// createUser creates the user of a first login: its e-mail is the claimed one
// when no user has it yet, else a placeholder under the reserved .invalid domain
// (RFC 2606) that names the identity, so that nobody's account is taken over.
func (s *Service) createUser(ctx context.Context, c claims) (store.User, store.Identity, error) {
	id := store.Identity{Issuer: c.Issuer, Subject: c.Subject, Email: c.Email, Groups: c.Groups}
	emails := []string{}
	if c.Email != "" {
		emails = append(emails, c.Email)
	}
	emails = append(emails, placeholderEmail(c.Issuer, c.Subject))
	for _, email := range emails {
		u, err := s.cfg.Store.CreateIdentityUser(ctx, store.User{Email: email, Nickname: c.Name, Role: store.RoleUser}, id)
		if err == nil {
			s.cfg.Audit(ctx, store.AuditRecord{Action: "user.create", UserID: u.ID, UserEmail: u.Email,
				Target: "user:" + strconv.FormatInt(u.ID, 10), Result: "ok",
				Params: jsonParams(map[string]any{"via": "oidc", "issuer": c.Issuer, "subject": c.Subject})})
			id.UserID = u.ID
			return u, id, nil
		}
		if errs.KindOf(err) != errs.Conflict {
			return store.User{}, store.Identity{}, fmt.Errorf("single sign-on: create user: %w", err)
		}
		// Another login of the same identity may have won the race.
		if won, err := s.cfg.Store.IdentityFor(ctx, c.Issuer, c.Subject); err == nil {
			u, err := s.cfg.Store.UserByID(ctx, won.UserID)
			return u, won, err
		}
	}
	return store.User{}, store.Identity{}, fmt.Errorf("single sign-on: no e-mail free for %s at %s", c.Subject, c.Issuer)
}

func placeholderEmail(issuer, subject string) string {
	h := hashText(issuer + "\x00" + subject)[:16]
	host := hostOf(issuer)
	if host == "" {
		host = "sso"
	}
	return "sso-" + h + "@" + host + ".invalid"
}

// applyMappings gives the user what the group mappings of the login's groups
// give (docs/security.md item 43): the admin role when a group maps to admin (and
// takes it back when none does any more and a mapping, not an admin, gave it),
// and the mapped grants, added and removed to follow the groups; grants an admin
// gave by hand stay as they are (store.SyncMappedGrants).
func (s *Service) applyMappings(ctx context.Context, u store.User, id store.Identity, c claims) (store.User, error) {
	mappings, err := s.cfg.Store.GroupMappings(ctx)
	if err != nil {
		return store.User{}, fmt.Errorf("single sign-on: read group mappings: %w", err)
	}
	wantAdmin, want := mapped(mappings, c.Groups)
	switch {
	case wantAdmin && u.Role != store.RoleAdmin:
		u.Role, id.MappedAdmin = store.RoleAdmin, true
		if u, err = s.cfg.Store.UpdateUser(ctx, u); err != nil {
			return store.User{}, fmt.Errorf("single sign-on: give the mapped admin role: %w", err)
		}
		s.auditRole(ctx, u, store.RoleAdmin)
	case !wantAdmin && id.MappedAdmin && u.Role == store.RoleAdmin:
		last, err := s.lastAdmin(ctx, u)
		if err != nil {
			return store.User{}, err
		}
		if last {
			// vmgate must keep an enabled admin (accounts' last_admin rule): the
			// role stays, mapped still, until another admin exists.
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "the mapped admin role stays: the user is the last enabled admin",
				slog.Int64("user", u.ID))
			break
		}
		u.Role, id.MappedAdmin = store.RoleUser, false
		if u, err = s.cfg.Store.UpdateUser(ctx, u); err != nil {
			return store.User{}, fmt.Errorf("single sign-on: take the mapped admin role: %w", err)
		}
		s.auditRole(ctx, u, store.RoleUser)
	case !wantAdmin:
		id.MappedAdmin = false
	}
	changes, err := s.cfg.Store.SyncMappedGrants(ctx, u.ID, want)
	if err != nil {
		return store.User{}, fmt.Errorf("single sign-on: %w", err)
	}
	for _, ch := range changes {
		rec := store.AuditRecord{Action: "grant.put", Target: "user:" + strconv.FormatInt(u.ID, 10), ClusterID: ch.ClusterID,
			Result: "ok", Params: jsonParams(map[string]any{"via": "group_mapping", "role": ch.Role, "was": ch.Was,
				"scope": scopeParam(ch.Scope), "wasScope": scopeParam(ch.WasScope)})}
		if ch.Role == "" {
			rec.Action = "grant.delete"
		}
		s.cfg.Audit(ctx, rec)
	}
	id.Email, id.Groups, id.LastLoginAt = c.Email, c.Groups, s.cfg.Now()
	if err := s.cfg.Store.NoteIdentityLogin(ctx, id); err != nil {
		return store.User{}, fmt.Errorf("single sign-on: %w", err)
	}
	return u, nil
}

// lastAdmin reports whether u is the only enabled admin.
func (s *Service) lastAdmin(ctx context.Context, u store.User) (bool, error) {
	users, err := s.cfg.Store.ListUsers(ctx)
	if err != nil {
		return false, fmt.Errorf("single sign-on: read users: %w", err)
	}
	for _, o := range users {
		if o.ID != u.ID && o.Role == store.RoleAdmin && !o.Disabled {
			return false, nil
		}
	}
	return true, nil
}

func (s *Service) auditRole(ctx context.Context, u store.User, role string) {
	s.cfg.Audit(ctx, store.AuditRecord{Action: "user.update", Target: "user:" + strconv.FormatInt(u.ID, 10), Result: "ok",
		Params: jsonParams(map[string]any{"via": "group_mapping", "role": role})})
}

// mapped is what the mappings give the groups: the admin role or not, and one
// grant per cluster (a user holds one grant a cluster), by cluster. Its role is
// the strongest any mapping gives on that cluster; its scope is the union of the
// scopes the mappings give with that role, or the whole cluster when one of
// them gives it unscoped. It never gives more than one of the mappings says: a
// weaker role of another mapping is not added outside the scope.
func mapped(mappings []store.GroupMapping, groups []string) (bool, []store.MappedGrant) {
	admin := false
	type pick struct {
		role  string
		wide  bool
		pools []string
		tags  []string
	}
	best := map[int64]*pick{}
	for _, m := range mappings {
		if !slices.Contains(groups, m.Group) {
			continue
		}
		admin = admin || m.Role == store.RoleAdmin
		for _, g := range m.Grants {
			p := best[g.ClusterID]
			if p == nil || (p.role != store.GrantOperator && g.Role == store.GrantOperator) {
				p = &pick{role: g.Role}
				best[g.ClusterID] = p
			} else if p.role != g.Role {
				continue // a weaker role than the one picked
			}
			p.wide = p.wide || g.Scope.IsZero()
			p.pools = append(p.pools, g.Scope.Pools...)
			p.tags = append(p.tags, g.Scope.Tags...)
		}
	}
	out := make([]store.MappedGrant, 0, len(best))
	for id, p := range best {
		mg := store.MappedGrant{ClusterID: id, Role: p.role}
		if !p.wide {
			mg.Scope = store.GrantScope{Pools: sortedSet(p.pools), Tags: sortedSet(p.tags)}
		}
		out = append(out, mg)
	}
	slices.SortFunc(out, func(a, b store.MappedGrant) int { return cmp.Compare(a.ClusterID, b.ClusterID) })
	return admin, out
}

// scopeParam is a scope as the audit trail shows it: null for the whole cluster.
func scopeParam(g store.GrantScope) any {
	if g.IsZero() {
		return nil
	}
	return g
}

// sortedSet is s sorted without duplicates (nil when empty), as the store keeps
// a scope's entries.
func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
