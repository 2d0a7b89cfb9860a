package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/console"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store/storetest"
	"github.com/vmgate/vmgate/internal/testkit"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The scoped-grant matrix (docs/security.md item 42): users × clusters ×
// scopes × actions, including tasks and operations. Cluster A is the dev
// cluster with two guests of its own: VM 300 in pool team-a and VM 301 tagged
// "other"; cluster C is the dev cluster alone, where 300 and 301 do not exist.
//
//	olga  operator on A and C, scope {tags: [web]}   (A: VM 100, CT 200)
//	pete  operator on A,       scope {pools: [team-a]} (A: VM 300)
//	vera  viewer on A,         scope {tags: [web], pools: [team-a]}
//	wide  operator on A and C, no scope               (every guest)
//
// A guest outside the caller's scope must answer exactly as a guest that does
// not exist: the very bytes wide gets on C for the same request, PVE not asked
// about it (only its inventory, /cluster/resources, may be read), audited as
// access.denied.

type scopeUser struct {
	name  string
	role  string
	scope *fleet.GrantScope
	// sees are the guests of A the user's grant covers.
	sees []int64
}

var scopeUsers = []scopeUser{
	{name: "olga", role: fleet.GrantOperator, scope: &fleet.GrantScope{Tags: []string{"web"}}, sees: []int64{100, 200}},
	{name: "pete", role: fleet.GrantOperator, scope: &fleet.GrantScope{Pools: []string{"team-a"}}, sees: []int64{300}},
	{name: "vera", role: fleet.GrantViewer, scope: &fleet.GrantScope{Pools: []string{"team-a"}, Tags: []string{"web"}},
		sees: []int64{100, 200, 300}},
	{name: "wide", role: fleet.GrantOperator, sees: []int64{100, 101, 102, 103, 104, 105, 200, 201, 202, 203, 300, 301}},
}

// scopeGuest is a guest route's target: kind segment, node, vmid.
type scopeGuest struct {
	seg  string // "vm" or "lxc"
	node string
	vmid int64
}

// scopeGuestActions are the guest routes, {g} the guest's path
// (/api/v1/pve/{seg}/{c}/{node}/{vmid}); need is the grant's role they ask.
var scopeGuestActions = []matrixAction{
	{name: "status", method: "GET", path: "{g}", need: fleet.GrantViewer},
	{name: "start", method: "POST", path: "{g}/start", need: fleet.GrantOperator},
	{name: "stop", method: "POST", path: "{g}/stop?force=true", need: fleet.GrantOperator},
	{name: "reboot", method: "POST", path: "{g}/reboot", need: fleet.GrantOperator},
	{name: "suspend", method: "POST", path: "{g}/suspend", need: fleet.GrantOperator},
	{name: "resume", method: "POST", path: "{g}/resume", need: fleet.GrantOperator},
	{name: "migrate check", method: "GET", path: "{g}/migrate?target=pve3", need: fleet.GrantViewer},
	{name: "migrate", method: "POST", path: "{g}/migrate", body: `{"target":"pve3","online":false}`, need: fleet.GrantOperator},
	{name: "console", method: "POST", path: "{g}/console", need: fleet.GrantOperator},
}

// scopeEnv is the matrix's world.
type scopeEnv struct {
	*testEnv
	a, c int64 // cluster ids
}

func newScopeEnv(t *testing.T, dsn string) *scopeEnv {
	t.Helper()
	te := newTestEnvOn(t, dsn, auth.Config{
		Argon2:          auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		PerAddressRate:  rate.Inf,
		PerAddressBurst: 1,
	})
	e := &scopeEnv{testEnv: te}
	simA, simC := e.addSim("A"), e.addSim("C")
	for _, v := range []pvesim.VMSpec{
		{VMID: 300, Node: "pve2", Name: "team-app", CPUs: 1, MemBytes: 1 << 30, Pool: "team-a"},
		{VMID: 301, Node: "pve2", Name: "other-app", CPUs: 1, MemBytes: 1 << 30, Tags: "other"},
	} {
		if err := simA.c.AddVM(v); err != nil {
			t.Fatal(err)
		}
	}
	e.a, e.c = simA.id, simC.id
	e.addUser("admin", accounts.RoleAdmin)
	for _, u := range scopeUsers {
		e.addUser(u.name, accounts.RoleUser)
		for _, cid := range []int64{e.a, e.c} {
			if cid == e.c && u.name != "olga" && u.name != "wide" {
				continue
			}
			if _, err := e.fleet.PutScopedGrant(context.Background(), setupActor, e.users[u.name].ID, cid, u.role, u.scope); err != nil {
				t.Fatal(err)
			}
		}
	}
	svc := vmops.New(vmops.Config{Store: e.store, Clients: e.fleet, Audit: e.trail, PollInterval: vmPoll, Sweep: time.Hour})
	t.Cleanup(svc.Close)
	cfg := e.apiConfig()
	cfg.VMs = svc
	cfg.Operations = operations.New(svc, operations.Config{Store: e.store, Audit: e.trail})
	consoles, err := console.New(console.Config{Store: e.store.(console.Store), Grants: e.fleet, Audit: e.trail,
		Connect: func(ctx context.Context, id int64) (console.PVE, error) { return e.fleet.Client(ctx, id) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consoles.Close)
	cfg.Consoles = consoles
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.api, e.h = api, apitest.Wrap(t, api)
	return e
}

// guestAsked counts the requests the emulated clusters received about
// anything but their inventory (/cluster/resources, which a scope is judged on).
func (e *scopeEnv) guestAsked() int {
	n := 0
	for _, s := range e.sims {
		for _, rt := range pvesim.Routes() {
			if rt.Path != "/cluster/resources" {
				n += s.c.Requests(rt.Method, rt.Path)
			}
		}
	}
	return n
}

func (e *scopeEnv) guestPath(cid int64, g scopeGuest) string {
	return fmt.Sprintf("/api/v1/pve/%s/%d/%s/%d", g.seg, cid, g.node, g.vmid)
}

// guestsOfA are the guests the matrix tries on cluster A.
var guestsOfA = []scopeGuest{
	{"vm", "pve1", 100}, {"vm", "pve1", 101}, {"lxc", "pve1", 200}, {"lxc", "pve2", 201},
	{"vm", "pve2", 300}, {"vm", "pve2", 301},
}

func TestScopeMatrix(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		runScopeMatrix(t, newScopeEnv(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db")))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		runScopeMatrix(t, newScopeEnv(t, storetest.FreshSchema(t)))
	})
}

func runScopeMatrix(t *testing.T, e *scopeEnv) {
	t.Run("guest actions", func(t *testing.T) { scopeGuestMatrix(t, e) })
	t.Run("lists", func(t *testing.T) { scopeLists(t, e) })
	t.Run("tasks", func(t *testing.T) { scopeTasks(t, e) })
	t.Run("operations", func(t *testing.T) { scopeOperations(t, e) })
	t.Run("API token", func(t *testing.T) { scopeToken(t, e) })
	t.Run("admin API", func(t *testing.T) { scopeAdmin(t, e) })
}

// running are the guests of A that run (the dev cluster's 100 and 200); the
// others are stopped. An allowed action is chosen so that PVE refuses it by the
// guest's state (start a running one, stop a stopped one): it reaches PVE and
// leaves the guests as they were.
var running = []int64{100, 200}

// stateRefused reports whether action a on guest g is one PVE (or vmgate, once
// it has read the guest) refuses by the guest's state, changing nothing.
func stateRefused(a matrixAction, g scopeGuest) bool {
	run := slices.Contains(running, g.vmid)
	switch a.name {
	case "status", "migrate check":
		return true
	case "start":
		return run
	case "resume":
		return run && g.seg == "vm"
	case "stop", "reboot", "console":
		return !run
	case "suspend":
		return !run && g.seg == "vm"
	}
	return false // migrate: it would move the guest
}

// scopeGuestMatrix: every user × guest of A × guest action. First the
// refusals, while nothing runs at PVE, so that "PVE was not asked" is exact: a
// guest outside the scope answers the bytes a guest that does not exist gets
// (wide, on cluster C, which lacks 300 and 301), PVE not asked about it,
// audited; a viewer asking an operator action gets the viewer's 403 whether or
// not the guest is in scope (the role is judged first, and says nothing of the
// guest). Then the guests in scope: the action reaches PVE.
func scopeGuestMatrix(t *testing.T, e *scopeEnv) {
	absent := map[string][]byte{}
	for _, a := range scopeGuestActions {
		for _, g := range []scopeGuest{{"vm", "pve2", 300}, {"vm", "pve2", 301}} {
			path := strings.ReplaceAll(a.path, "{g}", e.guestPath(e.c, g))
			w := e.do("wide", a.method, path, a.body)
			if w.Code != 404 {
				t.Fatalf("%s of absent VM %d on C: %d %s, want 404", a.name, g.vmid, w.Code, w.Body)
			}
			absent[a.name+"/"+strconv.FormatInt(g.vmid, 10)] = w.Body.Bytes()
		}
	}
	viewer403 := map[string][]byte{}
	for _, u := range scopeUsers {
		for _, g := range guestsOfA {
			for _, a := range scopeGuestActions {
				if g.seg == "lxc" && (a.name == "suspend" || a.name == "resume") {
					continue // not offered for a CT, whoever asks (400 before any grant)
				}
				label := fmt.Sprintf("%s of %s %d as %s", a.name, g.seg, g.vmid, u.name)
				inScope := slices.Contains(u.sees, g.vmid)
				path := strings.ReplaceAll(a.path, "{g}", e.guestPath(e.a, g))
				viewerOnly := a.need == fleet.GrantOperator && u.role == fleet.GrantViewer
				if inScope && !viewerOnly {
					continue // below
				}
				before := e.guestAsked()
				w := e.do(u.name, a.method, path, a.body)
				if asked := e.guestAsked() - before; asked != 0 {
					t.Errorf("%s: refused, yet PVE was asked %d times", label, asked)
				}
				if viewerOnly {
					prev, seen := viewer403[a.name]
					if w.Code != 403 || seen && !bytes.Equal(prev, w.Body.Bytes()) {
						t.Errorf("%s: %d %s, want the viewer's 403 %s", label, w.Code, w.Body, prev)
					}
					viewer403[a.name] = w.Body.Bytes()
					continue
				}
				if w.Code != 404 {
					t.Errorf("%s: %d %s, want 404", label, w.Code, w.Body)
					continue
				}
				if want, ok := absent[a.name+"/"+strconv.FormatInt(g.vmid, 10)]; ok && !bytes.Equal(w.Body.Bytes(), want) {
					t.Errorf("%s: 404 body %s differs from an absent guest's %s", label, w.Body, want)
				}
				noun := map[string]string{"vm": "VM", "lxc": "CT"}[g.seg]
				if wantMsg := fmt.Sprintf(`"message":"%s %d not found on node %s"`, noun, g.vmid, g.node); !bytes.Contains(w.Body.Bytes(), []byte(wantMsg)) {
					t.Errorf("%s: 404 body %s, want %s", label, w.Body, wantMsg)
				}
				rec := e.lastAudit()
				if rec.Action != "access.denied" || rec.Result != "denied" || rec.UserID != e.users[u.name].ID || rec.ClusterID != e.a {
					t.Errorf("%s: refusal not audited: %+v", label, rec)
				}
			}
		}
	}
	for _, u := range scopeUsers {
		for _, g := range guestsOfA {
			for _, a := range scopeGuestActions {
				if !slices.Contains(u.sees, g.vmid) || (a.need == fleet.GrantOperator && u.role == fleet.GrantViewer) || !stateRefused(a, g) {
					continue
				}
				label := fmt.Sprintf("%s of %s %d as %s", a.name, g.seg, g.vmid, u.name)
				before := e.guestAsked()
				w := e.do(u.name, a.method, strings.ReplaceAll(a.path, "{g}", e.guestPath(e.a, g)), a.body)
				want := 409
				if a.method == "GET" {
					want = 200
				}
				if asked := e.guestAsked() - before; asked == 0 || w.Code != want {
					t.Errorf("%s: %d %s (PVE asked %d times), want %d from PVE", label, w.Code, w.Body, asked, want)
				}
			}
		}
	}
}

// guestIDs decodes a guest list's vmids (a cluster's or the fleet's).
func guestIDs(t *testing.T, w *httptest.ResponseRecorder) []string {
	t.Helper()
	env := envelopeOf(t, w)
	var got []struct {
		ClusterID int64 `json:"clusterId"`
		VMID      int64 `json:"vmid"`
	}
	if err := json.Unmarshal(env.Data, &got); err != nil || w.Code != 200 {
		t.Fatalf("guest list: %d %s", w.Code, w.Body)
	}
	out := make([]string, 0, len(got))
	for _, g := range got {
		out = append(out, fmt.Sprintf("%d/%d", g.ClusterID, g.VMID))
	}
	return out
}

// scopeLists: the cluster's guest list and the fleet's show a scoped user the
// guests in scope only, paged as the list pages.
func scopeLists(t *testing.T, e *scopeEnv) {
	for _, u := range scopeUsers {
		var want []string
		for _, id := range u.sees {
			want = append(want, fmt.Sprintf("%d/%d", e.a, id))
		}
		got := guestIDs(t, e.do(u.name, "GET", "/api/v1/pve/guests", ""))
		var onA []string
		for _, g := range got {
			if strings.HasPrefix(g, strconv.FormatInt(e.a, 10)+"/") {
				onA = append(onA, g)
			}
		}
		if strings.Join(onA, " ") != strings.Join(want, " ") {
			t.Errorf("%s: fleet list shows %v on A, want %v", u.name, onA, want)
		}
		if u.name == "olga" {
			for _, g := range got {
				if strings.HasPrefix(g, strconv.FormatInt(e.c, 10)+"/") && g != fmt.Sprintf("%d/100", e.c) && g != fmt.Sprintf("%d/200", e.c) {
					t.Errorf("olga: fleet list shows %s on C, outside her tags", g)
				}
			}
		}
		w := e.do(u.name, "GET", fmt.Sprintf("/api/v1/pve/clusters/%d/guests", e.a), "")
		env := envelopeOf(t, w)
		var cl []struct {
			VMID int64 `json:"vmid"`
		}
		if err := json.Unmarshal(env.Data, &cl); err != nil || w.Code != 200 {
			t.Fatalf("%s: cluster guests: %d %s", u.name, w.Code, w.Body)
		}
		var ids []int64
		for _, g := range cl {
			ids = append(ids, g.VMID)
		}
		if !slices.Equal(ids, u.sees) {
			t.Errorf("%s: cluster A's guests %v, want %v", u.name, ids, u.sees)
		}
		// Paged one at a time, the pages still hold only guests in scope.
		w = e.do(u.name, "GET", fmt.Sprintf("/api/v1/pve/clusters/%d/vms?limit=1", e.a), "")
		if w.Code != 200 {
			t.Fatalf("%s: paged VMs: %d %s", u.name, w.Code, w.Body)
		}
		if u.name == "pete" && !bytes.Contains(w.Body.Bytes(), []byte(`"vmid":300`)) {
			t.Errorf("pete: first page of VMs %s, want VM 300", w.Body)
		}
		if u.name == "olga" && !bytes.Contains(w.Body.Bytes(), []byte(`"vmid":100`)) {
			t.Errorf("olga: first page of VMs %s, want VM 100", w.Body)
		}
	}
}

// taskOf starts VM vmid's reboot or start as user and returns the task's UPID.
func (e *scopeEnv) taskOf(t *testing.T, user string, cid int64, node string, vmid int64, op string) string {
	t.Helper()
	w := e.do(user, "POST", fmt.Sprintf("/api/v1/pve/vm/%d/%s/%d/%s", cid, node, vmid, op), "")
	id := w.Header().Get("X-Task-Id")
	if w.Code >= 300 || id == "" {
		t.Fatalf("%s %s VM %d: %d %s", user, op, vmid, w.Code, w.Body)
	}
	return id
}

// scopeTasks: a task about a guest outside the caller's scope answers as a
// task that does not exist, by UPID or reference, with a cluster given or not;
// the task lists leave it out.
func scopeTasks(t *testing.T, e *scopeEnv) {
	other := e.taskOf(t, "wide", e.a, "pve2", 301, "start") // outside every scope
	team := e.taskOf(t, "pete", e.a, "pve2", 300, "start")  // pete's, vera's
	// Both end before the refusals are checked: a running task is polled,
	// which would blur "PVE was not asked".
	for _, upid := range []string{other, team} {
		testkit.Until(t, "task "+upid+" ends", func() bool {
			w := e.do("wide", "GET", "/api/v1/pve/task/"+upid, "")
			return w.Code == 200 && bytes.Contains(w.Body.Bytes(), []byte(`"status":"stopped"`))
		})
	}
	// A UPID of the same shape no cluster knows: its 404s are the pattern.
	ghost := strings.Replace(other, ":qmstart:301:", ":qmstart:399:", 1)
	if ghost == other {
		t.Fatalf("UPID %s has not the expected shape", other)
	}
	for _, u := range scopeUsers {
		for _, c := range []struct {
			upid string
			in   bool
		}{{other, slices.Contains(u.sees, 301)}, {team, slices.Contains(u.sees, 300)}} {
			for _, q := range []string{"", fmt.Sprintf("?clusterId=%d", e.a)} {
				label := fmt.Sprintf("task %s%s as %s", c.upid, q, u.name)
				before := e.guestAsked()
				w := e.do(u.name, "GET", "/api/v1/pve/task/"+c.upid+q, "")
				if c.in {
					if w.Code != 200 {
						t.Errorf("%s: %d %s, want 200", label, w.Code, w.Body)
					}
					continue
				}
				if e.guestAsked() != before {
					t.Errorf("%s: refused, yet PVE was asked", label)
				}
				// The ghost's answer as the same user gives, with its UPID, the
				// bytes of a task that does not exist.
				g := e.do("wide", "GET", "/api/v1/pve/task/"+ghost+q, "")
				want := bytes.ReplaceAll(g.Body.Bytes(), []byte(ghost), []byte(c.upid))
				if w.Code != 404 || g.Code != 404 || !bytes.Equal(w.Body.Bytes(), want) {
					t.Errorf("%s: %d %s, want 404 %s", label, w.Code, w.Body, want)
				}
			}
		}
		w := e.do(u.name, "GET", fmt.Sprintf("/api/v1/pve/tasks?clusterId=%d", e.a), "")
		if w.Code != 200 {
			t.Fatalf("%s: tasks: %d %s", u.name, w.Code, w.Body)
		}
		for _, c := range []struct {
			upid string
			vmid int64
		}{{other, 301}, {team, 300}} {
			if listed, in := bytes.Contains(w.Body.Bytes(), []byte(c.upid)), slices.Contains(u.sees, c.vmid); listed != in {
				t.Errorf("%s: task list shows the task of VM %d: %v, want %v", u.name, c.vmid, listed, in)
			}
		}
	}
}

// scopeOperations: a bulk action of a scoped user acts only on guests in scope
// (one outside is skipped as one the cluster does not have); evacuation and
// maintenance need a cluster-wide grant; an operation over a guest outside the
// scope answers as one that does not exist and is left out of the list.
func scopeOperations(t *testing.T, e *scopeEnv) {
	plan := func(user, body string) (int, string) {
		w := e.do(user, "POST", fmt.Sprintf("/api/v1/pve/clusters/%d/bulk/stop", e.a), body)
		return w.Code, w.Body.String()
	}
	code, out := plan("olga", `{"vmids":[100,301],"dryRun":true}`)
	code2, absent := plan("wide", `{"vmids":[100,399],"dryRun":true}`)
	if code != 200 || code2 != 200 {
		t.Fatalf("bulk plans: %d %s / %d %s", code, out, code2, absent)
	}
	if strings.ReplaceAll(out, "301", "X") != strings.ReplaceAll(absent, "399", "X") {
		t.Errorf("olga's plan over an out-of-scope VM %s differs from a plan over an absent one %s", out, absent)
	}

	for _, a := range []matrixAction{
		{name: "evacuate", method: "POST", path: "/api/v1/pve/clusters/{c}/nodes/pve1/evacuate", body: `{"dryRun":true}`},
		{name: "maintenance", method: "POST", path: "/api/v1/pve/clusters/{c}/nodes/pve3/maintenance", body: `{"dryRun":true}`},
	} {
		path := strings.ReplaceAll(a.path, "{c}", strconv.FormatInt(e.a, 10))
		for _, u := range scopeUsers {
			before := e.guestAsked()
			w := e.do(u.name, a.method, path, a.body)
			if u.scope == nil {
				if w.Code == 403 || w.Code == 404 {
					t.Errorf("%s as %s: %d %s, want it allowed", a.name, u.name, w.Code, w.Body)
				}
				continue
			}
			if env := envelopeOf(t, w); w.Code != 403 || (u.role == fleet.GrantOperator && env.Reason != "scoped_grant") {
				t.Errorf("%s as %s: %d %s, want 403 scoped_grant", a.name, u.name, w.Code, w.Body)
			}
			if e.guestAsked() != before {
				t.Errorf("%s as %s: refused, yet PVE was asked", a.name, u.name)
			}
		}
	}

	// Real operations: wide's over 301, pete's over 300.
	launch := func(user string, vmid int64) int64 {
		w := e.do(user, "POST", fmt.Sprintf("/api/v1/pve/clusters/%d/bulk/stop", e.a), fmt.Sprintf(`{"vmids":[%d],"force":true}`, vmid))
		env := envelopeOf(t, w)
		var d struct {
			OperationID int64 `json:"operationId"`
		}
		if err := json.Unmarshal(env.Data, &d); err != nil || d.OperationID == 0 {
			t.Fatalf("%s's bulk over %d: %d %s", user, vmid, w.Code, w.Body)
		}
		return d.OperationID
	}
	otherOp, teamOp := launch("wide", 301), launch("pete", 300)
	ghost := teamOp + 1000
	for _, u := range scopeUsers {
		for _, c := range []struct {
			id int64
			in bool
		}{{otherOp, slices.Contains(u.sees, 301)}, {teamOp, slices.Contains(u.sees, 300)}} {
			w := e.do(u.name, "GET", operationPath(c.id), "")
			if c.in {
				if w.Code != 200 {
					t.Errorf("operation %d as %s: %d %s, want 200", c.id, u.name, w.Code, w.Body)
				}
				continue
			}
			g := e.do(u.name, "GET", operationPath(ghost), "")
			want := bytes.ReplaceAll(g.Body.Bytes(), []byte(strconv.FormatInt(ghost, 10)), []byte(strconv.FormatInt(c.id, 10)))
			if w.Code != 404 || !bytes.Equal(w.Body.Bytes(), want) {
				t.Errorf("operation %d as %s: %d %s, want 404 %s", c.id, u.name, w.Code, w.Body, want)
			}
		}
		w := e.do(u.name, "GET", fmt.Sprintf("/api/v1/pve/operations?clusterId=%d", e.a), "")
		env := envelopeOf(t, w)
		var ops []struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(env.Data, &ops); err != nil || w.Code != 200 {
			t.Fatalf("%s: operations: %d %s", u.name, w.Code, w.Body)
		}
		var ids []int64
		for _, o := range ops {
			ids = append(ids, o.ID)
		}
		var want []int64
		if slices.Contains(u.sees, 300) {
			want = append(want, teamOp)
		}
		if slices.Contains(u.sees, 301) {
			want = append(want, otherOp)
		}
		slices.Sort(ids)
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("%s: operations listed %v, want %v", u.name, ids, want)
		}
	}
}

// scopeAdmin: the admin API gives, shows and drops a scope, refusing a bad one.
func scopeAdmin(t *testing.T, e *scopeEnv) {
	path := fmt.Sprintf("/api/v1/clusters/%d/grants/%d", e.a, e.users["olga"].ID)
	w := e.do("admin", "GET", path, "")
	if w.Code != 200 || !bytes.Contains(w.Body.Bytes(), []byte(`"scope":{"pools":[],"tags":["web"]}`)) {
		t.Errorf("GET olga's grant: %d %s", w.Code, w.Body)
	}
	for _, bad := range []string{
		`{"role":"operator","scope":{}}`,
		`{"role":"operator","scope":{"pools":["bad pool"]}}`,
		`{"role":"operator","scope":{"tags":[";"]}}`,
		`{"role":"operator","scope":{"tags":"web"}}`,
	} {
		if w := e.do("admin", "PUT", path, bad); w.Code != 400 {
			t.Errorf("PUT %s: %d %s, want 400", bad, w.Code, w.Body)
		}
	}
	w = e.do("admin", "PUT", path, `{"role":"operator","scope":{"tags":["web","web","db"]}}`)
	if w.Code != 200 || !bytes.Contains(w.Body.Bytes(), []byte(`"scope":{"pools":[],"tags":["db","web"]}`)) {
		t.Errorf("PUT a scope: %d %s", w.Code, w.Body)
	}
	if w := e.do("olga", "GET", path, ""); w.Code != 403 {
		t.Errorf("GET a grant as olga: %d %s, want 403", w.Code, w.Body)
	}
	w = e.do("admin", "PUT", path, `{"role":"operator"}`)
	if w.Code != 200 || !bytes.Contains(w.Body.Bytes(), []byte(`"scope":null`)) {
		t.Errorf("PUT without a scope: %d %s", w.Code, w.Body)
	}
	// Cluster-wide again: olga sees VM 301 at once (the grant cache follows the feed).
	if w := e.do("olga", "GET", e.guestPath(e.a, scopeGuest{"vm", "pve2", 301}), ""); w.Code != 200 {
		t.Errorf("olga, cluster-wide, reads VM 301: %d %s", w.Code, w.Body)
	}
}

// scopeToken: an API token acts with its owner's scope: the same guests in and
// out, the same 404 for one outside.
func scopeToken(t *testing.T, e *scopeEnv) {
	w := e.do("olga", "POST", "/api/v1/user/tokens", `{"name":"script"}`)
	env := envelopeOf(t, w)
	var d struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(env.Data, &d); err != nil || d.Token == "" {
		t.Fatalf("olga's token: %d %s", w.Code, w.Body)
	}
	e.tokens["olga-token"] = d.Token
	in := e.guestPath(e.a, scopeGuest{"vm", "pve1", 100})
	out := e.guestPath(e.a, scopeGuest{"vm", "pve2", 301})
	if w := e.do("olga-token", "GET", in, ""); w.Code != 200 {
		t.Errorf("olga's token reads VM 100: %d %s", w.Code, w.Body)
	}
	byToken, bySession := e.do("olga-token", "GET", out, ""), e.do("olga", "GET", out, "")
	if byToken.Code != 404 || !bytes.Equal(byToken.Body.Bytes(), bySession.Body.Bytes()) {
		t.Errorf("olga's token reads VM 301: %d %s, want her session's 404 %s", byToken.Code, byToken.Body, bySession.Body)
	}
}
