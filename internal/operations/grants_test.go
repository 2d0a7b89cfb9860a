package operations

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// grantsEnv is the operations env with the real fleet as the grant checker: the
// emulator's cluster registered as cluster 1 (the env's services reach it), and
// callers holding each kind of grant on it.
type grantsEnv struct {
	*opsEnv
	callers map[string]vmops.Actor
}

func newGrantsEnv(t *testing.T) *grantsEnv {
	t.Helper()
	e := &opsEnv{env: newEnv(t, envOpts{})}
	ctx := context.Background()
	sealer, err := seal.New(bytes.Repeat([]byte{5}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	fl, err := fleet.New(ctx, fleet.Config{Store: e.store, Sealer: sealer, Audit: audit.New(e.audit, audit.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.Close)
	tokenID, secret, _ := strings.Cut(e.pveToken, "=")
	cl, err := fl.Register(ctx, fleet.ClusterSpec{Name: "dev", Endpoints: []string{e.pveURL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: e.pveFingerprint})
	if err != nil || cl.ID != 1 {
		t.Fatalf("register: %+v %v (the env's services reach cluster 1)", cl, err)
	}
	g := &grantsEnv{opsEnv: e, callers: map[string]vmops.Actor{}}
	setup := fleet.Actor{Role: store.RoleAdmin}
	for _, u := range []struct{ name, role, grant string }{
		{"admin", store.RoleAdmin, ""}, {"operator", store.RoleUser, fleet.GrantOperator},
		{"viewer", store.RoleUser, fleet.GrantViewer}, {"nobody", store.RoleUser, ""},
	} {
		user, err := e.store.CreateUser(ctx, store.User{Email: u.name + "@example.com", Nickname: u.name, PasswordHash: "x", Role: u.role})
		if err != nil {
			t.Fatal(err)
		}
		if u.grant != "" {
			if _, err := fl.PutGrant(ctx, setup, user.ID, cl.ID, u.grant); err != nil {
				t.Fatal(err)
			}
		}
		g.callers[u.name] = vmops.Actor{UserID: user.ID, Email: user.Email, Role: u.role, Via: "test as " + u.name}
	}
	admin := g.callers["admin"]
	// An admin's API tokens: one that reads cluster 1 only, one for another
	// cluster only (docs/security.md item 32).
	g.callers["admin token (viewer)"] = vmops.Actor{UserID: admin.UserID, Email: admin.Email, Role: store.RoleAdmin,
		Limit: map[int64]string{1: fleet.GrantViewer}, APITokenID: "tok1", Via: "test as admin token (viewer)"}
	g.callers["admin token (elsewhere)"] = vmops.Actor{UserID: admin.UserID, Email: admin.Email, Role: store.RoleAdmin,
		Limit: map[int64]string{2: fleet.GrantOperator}, APITokenID: "tok2", Via: "test as admin token (elsewhere)"}
	e.svc = e.newService(func(c *vmops.Config) { c.Grants = fl })
	e.ops = e.newOps(e.svc, Config{})
	return g
}

// TestUseCasesCheckGrants: every operation's use case refuses a caller whose
// grant does not allow it, with no adapter involved (issue 18
// (docs/history.md), "rules once"): no grant (or an API token for other
// clusters) is the NotFound of a cluster that does not exist, a viewer grant
// (or a viewer token narrowing an admin) is Forbidden for an action; the
// refusal is audited with the request as the caller made it and PVE gets no
// request (docs/security.md items 18, 19, 32). A caller whose grant allows it
// gets past the check.
func TestUseCasesCheckGrants(t *testing.T) {
	t.Parallel()
	g := newGrantsEnv(t)
	ctx := context.Background()
	// An operation on cluster 1 to read and cancel: a bulk start of a running
	// VM, which skips it and ends.
	launched, err := g.ops.Bulk(ctx, g.callers["operator"], 1, "start", BulkRequest{VMIDs: []int64{100}})
	if err != nil {
		t.Fatal(err)
	}
	opID := launched.OperationID
	actions := []struct {
		name string
		need string
		do   func(a vmops.Actor) error
	}{
		{"evacuate", fleet.GrantOperator, func(a vmops.Actor) error {
			_, err := g.ops.Evacuate(ctx, a, 1, "pve1", EvacuateRequest{DryRun: true})
			return err
		}},
		{"bulk", fleet.GrantOperator, func(a vmops.Actor) error {
			_, err := g.ops.Bulk(ctx, a, 1, "stop", BulkRequest{Selector: &Selector{Status: "running"}, DryRun: true})
			return err
		}},
		{"cancel operation", fleet.GrantOperator, func(a vmops.Actor) error {
			_, err := g.ops.CancelOperation(ctx, a, opID, false)
			return err
		}},
		{"operation", fleet.GrantViewer, func(a vmops.Actor) error { _, err := g.ops.Operation(ctx, a, opID); return err }},
		{"operation events", fleet.GrantViewer, func(a vmops.Actor) error {
			return g.ops.OperationEvents(ctx, a, opID, func(View) error { return nil })
		}},
		{"operations", fleet.GrantViewer, func(a vmops.Actor) error {
			_, err := g.ops.ListOperations(ctx, a, Filter{ClusterID: 1})
			return err
		}},
	}
	// want is the refusal a caller gets for an action that needs need; false
	// when it is allowed.
	want := func(caller, need string) (errs.Kind, bool) {
		switch caller {
		case "admin", "operator":
			return 0, false
		case "viewer", "admin token (viewer)":
			return errs.Forbidden, need != fleet.GrantViewer
		}
		return errs.NotFound, true // nobody, admin token (elsewhere)
	}
	for _, act := range actions {
		for _, caller := range []string{"admin", "operator", "viewer", "nobody", "admin token (viewer)", "admin token (elsewhere)"} {
			label := fmt.Sprintf("%s as %s", act.name, caller)
			a := g.callers[caller]
			before := totalRequests(g.sim)
			audits := len(g.audit.all("access.denied"))
			err := act.do(a)
			wantKind, refused := want(caller, act.need)
			if !refused {
				if errors.Is(err, vmops.ErrDenied) {
					t.Errorf("%s: refused: %v", label, err)
				}
				continue
			}
			if !errors.Is(err, vmops.ErrDenied) || errs.KindOf(err) != wantKind {
				t.Errorf("%s: %v (%s), want a refusal %s", label, err, errs.KindOf(err), wantKind)
				continue
			}
			if n := totalRequests(g.sim) - before; n != 0 {
				t.Errorf("%s: refused, yet PVE got %d requests", label, n)
			}
			denials := g.audit.all("access.denied")
			if len(denials) != audits+1 || denials[len(denials)-1].Target != a.Via {
				t.Errorf("%s: the refusal's audit records %+v, want one more naming %q", label, denials[audits:], a.Via)
			}
		}
	}
}

// TestOperationListNarrowsToGrants: the list of operations shows what the
// caller may read and nothing else: a caller without a grant sees none of the
// cluster's, and an admin's token narrowed to another cluster none either.
func TestOperationListNarrowsToGrants(t *testing.T) {
	t.Parallel()
	g := newGrantsEnv(t)
	ctx := context.Background()
	if _, err := g.ops.Bulk(ctx, g.callers["operator"], 1, "start", BulkRequest{VMIDs: []int64{100}}); err != nil {
		t.Fatal(err)
	}
	for caller, n := range map[string]int{"admin": 1, "viewer": 1, "admin token (viewer)": 1, "nobody": 0, "admin token (elsewhere)": 0} {
		ops, err := g.ops.ListOperations(ctx, g.callers[caller], Filter{})
		if err != nil || len(ops) != n {
			t.Errorf("operations as %s: %d %v, want %d", caller, len(ops), err, n)
		}
	}
}
