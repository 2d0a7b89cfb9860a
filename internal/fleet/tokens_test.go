package fleet

import (
	"context"
	"slices"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// TestAuthorizeUnderTokenGrants (docs/security.md item 32): an API token's grants cap its
// owner's role cluster by cluster — the weaker of the two, nothing where the token
// has no grant — in Authorize, Readable and Clusters; and the owner's grant is
// read at every call, so removing it takes the token's at once.
func TestAuthorizeUnderTokenGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, st := newTestService(t)
	c1, c2, c3 := storeCluster(t, svc, "c1"), storeCluster(t, svc, "c2"), storeCluster(t, svc, "c3")
	admin := storeUser(t, st, "admin@x", store.RoleAdmin)
	op := storeUser(t, st, "op@x", store.RoleUser)
	for _, c := range []store.Cluster{c1, c2} {
		if _, err := svc.PutGrant(ctx, rootActor, op.ID, c.ID, store.GrantOperator); err != nil {
			t.Fatal(err)
		}
	}
	limit := map[int64]string{c1.ID: store.GrantViewer, c2.ID: store.GrantOperator, c3.ID: store.GrantOperator}
	opTok := Actor{UserID: op.ID, Email: op.Email, Role: op.Role, Limit: limit}
	adminTok := Actor{UserID: admin.ID, Email: admin.Email, Role: admin.Role, Limit: map[int64]string{c2.ID: store.GrantViewer}}

	cases := []struct {
		a       Actor
		cluster int64
		need    string
		role    string
		kind    errs.Kind
	}{
		{opTok, c1.ID, store.GrantViewer, "viewer", 0},
		{opTok, c1.ID, store.GrantOperator, "", errs.Forbidden}, // the token's viewer under the owner's operator
		{opTok, c2.ID, store.GrantOperator, "operator", 0},
		{opTok, c3.ID, store.GrantViewer, "", errs.NotFound}, // the owner holds no grant on c3
		{adminTok, c2.ID, store.GrantViewer, "viewer", 0},
		{adminTok, c2.ID, store.GrantOperator, "", errs.Forbidden},
		{adminTok, c1.ID, store.GrantViewer, "", errs.NotFound}, // not in the token's grants
	}
	for _, tc := range cases {
		role, err := svc.Authorize(ctx, tc.a, tc.cluster, tc.need)
		if tc.kind != 0 {
			if errs.KindOf(err) != tc.kind {
				t.Fatalf("user %d on %d for %s: %v, want %v", tc.a.UserID, tc.cluster, tc.need, err, tc.kind)
			}
			continue
		}
		if err != nil || role != tc.role {
			t.Fatalf("user %d on %d for %s: %q %v, want %q", tc.a.UserID, tc.cluster, tc.need, role, err, tc.role)
		}
	}

	ids, all, err := svc.Readable(ctx, opTok)
	if err != nil || all || !slices.Equal(ids, []int64{c1.ID, c2.ID}) {
		t.Fatalf("readable by the operator's token: %v %v %v", ids, all, err)
	}
	ids, all, err = svc.Readable(ctx, adminTok)
	if err != nil || all || !slices.Equal(ids, []int64{c2.ID}) {
		t.Fatalf("readable by the admin's token: %v %v %v", ids, all, err)
	}
	views, err := svc.Clusters(ctx, opTok)
	if err != nil || len(views) != 2 || views[0].Role != "viewer" || views[1].Role != "operator" {
		t.Fatalf("clusters seen by the operator's token: %+v %v", views, err)
	}

	// The owner loses c2: the token with it, at the next call.
	if err := svc.DeleteGrant(ctx, rootActor, op.ID, c2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authorize(ctx, opTok, c2.ID, store.GrantViewer); !errs.Is(err, errs.NotFound) {
		t.Fatalf("after the owner lost the grant: %v", err)
	}
}
