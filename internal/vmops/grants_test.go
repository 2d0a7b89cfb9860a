package vmops

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
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// grantsEnv is the env with the real fleet as the grant checker: the emulator's
// cluster registered as cluster 1 (the env's clients serve it), and callers
// holding each kind of grant on it.
type grantsEnv struct {
	*env
	callers map[string]Actor
}

func newGrantsEnv(t *testing.T) *grantsEnv {
	t.Helper()
	e := newEnv(t, envOpts{})
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
		t.Fatalf("register: %+v %v (the env's clients serve cluster 1)", cl, err)
	}
	g := &grantsEnv{env: e, callers: map[string]Actor{}}
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
		g.callers[u.name] = Actor{UserID: user.ID, Email: user.Email, Role: u.role, Via: "test as " + u.name}
	}
	admin := g.callers["admin"]
	// An admin's API tokens: one that reads cluster 1 only, one for another
	// cluster only (docs/security.md item 32).
	g.callers["admin token (viewer)"] = Actor{UserID: admin.UserID, Email: admin.Email, Role: store.RoleAdmin,
		Limit: map[int64]string{1: fleet.GrantViewer}, APITokenID: "tok1", Via: "test as admin token (viewer)"}
	g.callers["admin token (elsewhere)"] = Actor{UserID: admin.UserID, Email: admin.Email, Role: store.RoleAdmin,
		Limit: map[int64]string{2: fleet.GrantOperator}, APITokenID: "tok2", Via: "test as admin token (elsewhere)"}
	e.svc = e.newService(func(c *Config) { c.Grants = fl })
	return g
}

// TestUseCasesCheckGrants: every use case refuses a caller whose grant does not
// allow it, with no adapter involved (issue 18 (docs/history.md), "rules once"):
// no grant (or an API token for other clusters) is the NotFound of a cluster that
// does not exist, a viewer grant (or a viewer token narrowing an admin) is
// Forbidden for an action; the refusal is audited with the request as the
// caller made it and PVE gets no request (docs/security.md items 18, 19, 32). A
// caller whose grant allows it gets past the check (here to a refusal by the
// guest's state, or a task PVE does not know). The operations on many guests
// have theirs in internal/operations (grants_test.go).
func TestUseCasesCheckGrants(t *testing.T) {
	t.Parallel()
	g := newGrantsEnv(t)
	ctx := context.Background()
	const unknownTask = "UPID:pve1:0000AAAA:00000BBB:6500000A:qmstart:100:root@pam:"
	actions := []struct {
		name string
		need string
		do   func(a Actor) error
	}{
		{"start", fleet.GrantOperator, func(a Actor) error { _, err := g.svc.Start(ctx, a, vm("pve1", 100), PowerOptions{}); return err }},
		{"stop", fleet.GrantOperator, func(a Actor) error {
			_, err := g.svc.Stop(ctx, a, vm("pve1", 101), StopOptions{Force: true})
			return err
		}},
		{"reboot", fleet.GrantOperator, func(a Actor) error { _, err := g.svc.Reboot(ctx, a, vm("pve1", 101), PowerOptions{}); return err }},
		{"suspend", fleet.GrantOperator, func(a Actor) error {
			_, err := g.svc.Suspend(ctx, a, vm("pve1", 101), SuspendOptions{})
			return err
		}},
		{"resume", fleet.GrantOperator, func(a Actor) error { _, err := g.svc.Resume(ctx, a, vm("pve1", 100), ResumeOptions{}); return err }},
		{"migrate", fleet.GrantOperator, func(a Actor) error {
			_, err := g.svc.Migrate(ctx, a, vm("pve1", 100), MigrateRequest{Target: "pve2", Online: boolp(false)})
			return err
		}},
		{"migrate check", fleet.GrantViewer, func(a Actor) error { _, err := g.svc.MigrateCheck(ctx, a, vm("pve1", 100), "pve2"); return err }},
		{"task", fleet.GrantViewer, func(a Actor) error { _, err := g.svc.Task(ctx, a, unknownTask, 1, 0); return err }},
		{"task log", fleet.GrantViewer, func(a Actor) error { _, err := g.svc.TaskLog(ctx, a, unknownTask, 1, 0, 10); return err }},
		{"task events", fleet.GrantViewer, func(a Actor) error {
			return g.svc.Events(ctx, a, unknownTask, 1, func(TaskView) error { return nil })
		}},
		{"tasks", fleet.GrantViewer, func(a Actor) error { _, err := g.svc.Tasks(ctx, a, TaskFilter{ClusterID: 1}); return err }},
		{"task page", fleet.GrantViewer, func(a Actor) error { _, _, err := g.svc.TaskPage(ctx, a, TaskFilter{ClusterID: 1}); return err }},
		{"may act", fleet.GrantOperator, func(a Actor) error { return g.svc.MayAct(ctx, a, 1) }},
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
				if errors.Is(err, ErrDenied) {
					t.Errorf("%s: refused: %v", label, err)
				}
				continue
			}
			if !errors.Is(err, ErrDenied) || errs.KindOf(err) != wantKind {
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

// TestUseCaseListsNarrowToGrants: the task list shows what the
// caller may read and nothing else: a caller without a grant sees none of the
// cluster's, and an admin's token narrowed to another cluster none either.
func TestUseCaseListsNarrowToGrants(t *testing.T) {
	t.Parallel()
	g := newGrantsEnv(t)
	ctx := context.Background()
	if _, err := g.svc.Start(ctx, g.callers["operator"], vm("pve1", 101), PowerOptions{Wait: MaxPowerWait}); err != nil {
		t.Fatal(err)
	}
	for caller, n := range map[string]int{"admin": 1, "viewer": 1, "admin token (viewer)": 1, "nobody": 0, "admin token (elsewhere)": 0} {
		tasks, err := g.svc.Tasks(ctx, g.callers[caller], TaskFilter{})
		if err != nil || len(tasks) != n {
			t.Errorf("tasks as %s: %d %v, want %d", caller, len(tasks), err, n)
		}
	}
}

// totalRequests counts every request the emulator received.
func totalRequests(sim *pvesim.Cluster) int {
	n := 0
	for _, r := range pvesim.Routes() {
		n += sim.Requests(r.Method, r.Path)
	}
	return n
}
