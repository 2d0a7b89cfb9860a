package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// newTestService returns a fleet on a fresh SQLite store.
func newTestService(t testing.TB, opts ...func(*Config)) (*Service, store.Store) {
	t.Helper()
	return newTestServiceAt(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db"), opts...)
}

// newTestServiceAt is newTestService on the store at dsn.
func newTestServiceAt(t testing.TB, dsn string, opts ...func(*Config)) (*Service, store.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := Config{Store: st, Sealer: testSealer(3)}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc, st
}

// testSealer returns a sealer whose key is KeySize bytes of b.
func testSealer(b byte) *seal.Sealer {
	s, err := seal.New(bytes.Repeat([]byte{b}, seal.KeySize))
	if err != nil {
		panic(err)
	}
	return s
}

// storeCluster writes a cluster straight into the store (no PVE behind it).
func storeCluster(t *testing.T, svc *Service, name string) store.Cluster {
	t.Helper()
	sealed, err := svc.sealSecret("secret-"+name, "vmgate@pve!gw")
	if err != nil {
		t.Fatal(err)
	}
	c, err := svc.store.CreateCluster(context.Background(), store.Cluster{Name: name, TokenID: "vmgate@pve!gw", TokenSecretSealed: sealed,
		Endpoints: []store.Endpoint{{URL: closedEndpoint(t), Node: "pve1", Fingerprint: fp(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// closedEndpoint is an https URL on a local port nothing listens on.
func closedEndpoint(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "https://" + ln.Addr().String()
}

func storeUser(t *testing.T, st store.Store, email, role string) store.User {
	t.Helper()
	u, err := st.CreateUser(context.Background(), store.User{Email: email, Nickname: email, PasswordHash: "x", Role: role})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestAuthorize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, st := newTestService(t)
	c := storeCluster(t, svc, "c1")
	admin := storeUser(t, st, "admin@x", store.RoleAdmin)
	op := storeUser(t, st, "op@x", store.RoleUser)
	viewer := storeUser(t, st, "viewer@x", store.RoleUser)
	none := storeUser(t, st, "none@x", store.RoleUser)
	if _, err := svc.PutGrant(ctx, rootActor, op.ID, c.ID, store.GrantOperator); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutGrant(ctx, rootActor, viewer.ID, c.ID, store.GrantViewer); err != nil {
		t.Fatal(err)
	}
	actor := func(u store.User) Actor { return Actor{UserID: u.ID, Email: u.Email, Role: u.Role} }
	const missing = 999
	type res struct {
		role string
		kind errs.Kind // Internal = no error
	}
	ok := func(role string) res { return res{role: role, kind: -1} }
	cases := []struct {
		who     store.User
		cluster int64
		need    string
		want    res
	}{
		{admin, c.ID, store.GrantOperator, ok("admin")},
		{admin, missing, store.GrantViewer, res{kind: errs.NotFound}},
		{op, c.ID, store.GrantOperator, ok("operator")},
		{op, c.ID, store.GrantViewer, ok("operator")},
		{op, missing, store.GrantViewer, res{kind: errs.NotFound}},
		{viewer, c.ID, store.GrantViewer, ok("viewer")},
		{viewer, c.ID, store.GrantOperator, res{kind: errs.Forbidden}},
		{none, c.ID, store.GrantViewer, res{kind: errs.NotFound}},
		{none, missing, store.GrantViewer, res{kind: errs.NotFound}},
	}
	var notFoundBodies [][]byte
	for _, tc := range cases {
		role, err := svc.Authorize(ctx, actor(tc.who), tc.cluster, tc.need)
		if tc.want.kind == -1 {
			if err != nil || role != tc.want.role {
				t.Errorf("%s on %d needing %s: %q, %v; want %q", tc.who.Email, tc.cluster, tc.need, role, err, tc.want.role)
			}
			continue
		}
		if errs.KindOf(err) != tc.want.kind {
			t.Errorf("%s on %d needing %s: %v; want kind %v", tc.who.Email, tc.cluster, tc.need, err, tc.want.kind)
		}
		if tc.want.kind == errs.NotFound {
			e, _ := errs.As(err)
			b, _ := json.Marshal(e)
			notFoundBodies = append(notFoundBodies, b)
		}
	}
	for _, b := range notFoundBodies[1:] {
		if !bytes.Equal(b, notFoundBodies[0]) {
			t.Fatalf("not-found answers differ: %s vs %s", b, notFoundBodies[0])
		}
	}
	if _, err := svc.Authorize(ctx, actor(op), c.ID, "owner"); err == nil {
		t.Fatal("an unknown need was granted")
	}
}

func TestGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, st := newTestService(t)
	c := storeCluster(t, svc, "c1")
	u := storeUser(t, st, "u@x", store.RoleUser)

	if _, err := svc.PutGrant(ctx, rootActor, u.ID, c.ID, "owner"); errs.KindOf(err) != errs.Invalid {
		t.Fatalf("bad role: %v", err)
	}
	if _, err := svc.PutGrant(ctx, rootActor, 999, c.ID, store.GrantViewer); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("missing user: %v", err)
	}
	if _, err := svc.PutGrant(ctx, rootActor, u.ID, 999, store.GrantViewer); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("missing cluster: %v", err)
	}
	g, err := svc.PutGrant(ctx, rootActor, u.ID, c.ID, store.GrantViewer)
	if err != nil || g.Role != store.GrantViewer {
		t.Fatalf("put: %+v, %v", g, err)
	}
	if g, err = svc.PutGrant(ctx, rootActor, u.ID, c.ID, store.GrantOperator); err != nil || g.Role != store.GrantOperator {
		t.Fatalf("change: %+v, %v", g, err)
	}
	if err := svc.DeleteGrant(ctx, rootActor, u.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteGrant(ctx, rootActor, u.ID, c.ID); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := svc.Authorize(ctx, Actor{UserID: u.ID, Role: store.RoleUser}, c.ID, store.GrantViewer); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("after delete: %v", err)
	}
}

func TestClustersListsOnlyVisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, st := newTestService(t)
	c1 := storeCluster(t, svc, "c1")
	c2 := storeCluster(t, svc, "c2")
	storeCluster(t, svc, "c3")
	u := storeUser(t, st, "u@x", store.RoleUser)
	svc.PutGrant(ctx, rootActor, u.ID, c2.ID, store.GrantViewer)
	svc.PutGrant(ctx, rootActor, u.ID, c1.ID, store.GrantOperator)

	got, err := svc.Clusters(ctx, Actor{UserID: u.ID, Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens behind these clusters.
	want := []ClusterView{{ID: c1.ID, Name: "c1", Role: "operator", Status: StatusUnavailable},
		{ID: c2.ID, Name: "c2", Role: "viewer", Status: StatusUnavailable}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	all, err := svc.Clusters(ctx, Actor{UserID: 1, Role: store.RoleAdmin})
	if err != nil || len(all) != 3 || all[2].Role != "admin" {
		t.Fatalf("admin sees %+v, %v", all, err)
	}
	none, err := svc.Clusters(ctx, Actor{UserID: 77, Role: store.RoleUser})
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("no grants: %#v, %v", none, err)
	}
}

func TestNewRefusesAWrongKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, st := newTestService(t)
	c := storeCluster(t, svc, "c1")
	got, err := st.ClusterByID(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(got.TokenSecretSealed, []byte("secret-c1")) {
		t.Fatal("the store holds the secret in clear")
	}
	if _, err := New(ctx, Config{Store: st, Sealer: testSealer(4)}); err == nil {
		t.Fatal("a wrong key was accepted although it opens no cluster")
	}
	if _, err := New(ctx, Config{Store: st, Sealer: testSealer(3)}); err != nil {
		t.Fatal(err)
	}
}

// TestUserGrants: an admin's view of a user's grants, by cluster id; none for a
// user without grants.
func TestUserGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, st := newTestService(t)
	c1, c2 := storeCluster(t, svc, "c1"), storeCluster(t, svc, "c2")
	op := storeUser(t, st, "op@x", store.RoleUser)
	none := storeUser(t, st, "none@x", store.RoleUser)
	if _, err := svc.PutGrant(ctx, rootActor, op.ID, c2.ID, GrantViewer); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutGrant(ctx, rootActor, op.ID, c1.ID, GrantOperator); err != nil {
		t.Fatal(err)
	}
	gs, err := svc.UserGrants(ctx, op.ID)
	if err != nil || len(gs) != 2 || gs[0].ClusterID != c1.ID || gs[0].Role != GrantOperator ||
		gs[1].ClusterID != c2.ID || gs[1].Role != GrantViewer || gs[0].UserID != op.ID || gs[0].CreatedAt.IsZero() {
		t.Fatalf("grants %+v %v", gs, err)
	}
	if gs, err := svc.UserGrants(ctx, none.ID); err != nil || len(gs) != 0 {
		t.Fatalf("no grants: %+v %v", gs, err)
	}
}

// testReader reads any cluster: the fleet's reads check a viewer grant, which an
// admin has on every cluster there is.
var testReader = Actor{UserID: 1, Email: "admin@example.com", Role: store.RoleAdmin}

// TestReadsCheckGrants: the inventory reads check the caller's viewer grant
// themselves (issue 18 (docs/history.md), "rules once"): a caller without one, or
// an admin's token for another cluster, gets the NotFound of a cluster that does
// not exist, audited with the request as the caller made it, and PVE is not asked.
func TestReadsCheckGrants(t *testing.T) {
	t.Parallel()
	s, svc, c := registeredSim(t, 0)
	ctx := context.Background()
	viewer := storeUser(t, svc.store, "viewer@x", store.RoleUser)
	none := storeUser(t, svc.store, "none@x", store.RoleUser)
	admin := storeUser(t, svc.store, "admin@x", store.RoleAdmin)
	if _, err := svc.PutGrant(ctx, rootActor, viewer.ID, c.ID, store.GrantViewer); err != nil {
		t.Fatal(err)
	}
	reads := []struct {
		name string
		do   func(a Actor) error
	}{
		{"node list", func(a Actor) error { _, err := svc.NodeList(ctx, a, c.ID); return err }},
		{"nodes", func(a Actor) error { _, err := svc.Nodes(ctx, a, c.ID); return err }},
		{"vms", func(a Actor) error { _, err := svc.VMs(ctx, a, c.ID); return err }},
		{"vm list", func(a Actor) error { _, err := svc.VMList(ctx, a, c.ID, VMQuery{}); return err }},
		{"container list", func(a Actor) error { _, err := svc.GuestList(ctx, a, c.ID, "lxc", VMQuery{}); return err }},
		{"guest list", func(a Actor) error { _, err := svc.GuestList(ctx, a, c.ID, "", VMQuery{}); return err }},
		{"vm status", func(a Actor) error { _, err := svc.VMStatus(ctx, a, c.ID, "pve1", 100); return err }},
		{"container status", func(a Actor) error { _, err := svc.GuestStatus(ctx, a, c.ID, "lxc", "pve1", 200); return err }},
	}
	callers := []struct {
		name    string
		a       Actor
		allowed bool
	}{
		{"viewer", Actor{UserID: viewer.ID, Email: viewer.Email, Role: viewer.Role}, true},
		{"admin", Actor{UserID: admin.ID, Email: admin.Email, Role: admin.Role}, true},
		{"no grant", Actor{UserID: none.ID, Email: none.Email, Role: none.Role}, false},
		{"admin token elsewhere", Actor{UserID: admin.ID, Email: admin.Email, Role: admin.Role,
			Limit: map[int64]string{c.ID + 1: store.GrantViewer}, APITokenID: "tok"}, false},
	}
	for _, rd := range reads {
		for _, cl := range callers {
			a := cl.a
			a.Via = "GET " + rd.name + " as " + cl.name
			before := s.requests()
			err := rd.do(a)
			if cl.allowed {
				if err != nil {
					t.Errorf("%s: %v", a.Via, err)
				}
				continue
			}
			if errs.KindOf(err) != errs.NotFound {
				t.Errorf("%s: %v, want NotFound", a.Via, err)
			}
			if n := s.requests() - before; n != 0 {
				t.Errorf("%s: refused, yet PVE got %d requests", a.Via, n)
			}
			if rec := lastRecord(t, svc.store); rec.Action != "access.denied" || rec.Target != a.Via {
				t.Errorf("%s: last audit record %+v", a.Via, rec)
			}
		}
	}
}
