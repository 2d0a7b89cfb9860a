package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/identity"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// This file holds the whole-stack test environment (real SQLite store, real auth,
// real fleet, emulated clusters over HTTPS) and the authorization matrix of users ×
// clusters × actions × roles (docs/security.md items 18, 19). The VM operations add their
// routes' actions and call runMatrix with them.

const envPassword = "violet-Harbor-lantern-drift-42"

// setupAdmin and setupActor are an admin's login session as the use cases see it:
// who sets the tests' users and grants up, straight through the use cases.
var (
	setupAdmin = auth.Principal{Role: accounts.RoleAdmin, SessionID: "test-setup"}
	setupActor = fleet.Actor{Role: accounts.RoleAdmin}
)

// testEnv is a vmgate HTTP stack with emulated clusters behind it.
type testEnv struct {
	t        testing.TB
	api      *Server
	h        http.Handler // api, its answers checked against api/openapi.yaml
	store    store.Store
	auth     *auth.Service
	accounts *accounts.Service
	trail    *audit.Trail
	fleet    *fleet.Service
	sims     map[string]*envSim
	users    map[string]accounts.User
	tokens   map[string]string // user name → bearer token
}

// envSim is docs/design.md §7's dev cluster (pve1–pve3, VMs 100–105) served over HTTPS
// and registered in vmgate under its name.
type envSim struct {
	c       *pvesim.Cluster
	srv     *pvesim.Server
	eps     []pvesim.Endpoint // pve1, pve2, pve3
	tokenID string
	secret  string
	id      int64 // vmgate's cluster id
}

// newTestEnv builds the stack with cheap password hashing and no login rate limit.
func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	return newTestEnvWith(t, auth.Config{
		Argon2:          auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		PerAddressRate:  rate.Inf,
		PerAddressBurst: 1,
	})
}

// newTestEnvWith is newTestEnv with the given auth configuration.
func newTestEnvWith(t testing.TB, cfg auth.Config) *testEnv {
	t.Helper()
	return newTestEnvOn(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db"), cfg)
}

// newTestEnvOn is newTestEnvWith on the store at dsn.
func newTestEnvOn(t testing.TB, dsn string, cfg auth.Config) *testEnv {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newTestEnvOnStore(t, st, cfg)
}

// newTestEnvOnStore is newTestEnvOn on an open store.
func newTestEnvOnStore(t testing.TB, st store.Store, cfg auth.Config) *testEnv {
	t.Helper()
	ctx := context.Background()
	trail := audit.New(st, audit.Options{})
	sealer, err := seal.New(bytes.Repeat([]byte{5}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Audit == nil {
		cfg.Audit = trail.Record
	}
	cfg.Sealer = sealer
	au, err := auth.New(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(au.Close)
	acc := accounts.New(accounts.Config{Store: st, Auth: au, Audit: trail})
	fl, err := fleet.New(ctx, fleet.Config{Store: st, Sealer: sealer, Audit: trail})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.Close)
	e := &testEnv{t: t, store: st, auth: au, accounts: acc, trail: trail, fleet: fl,
		sims: map[string]*envSim{}, users: map[string]accounts.User{}, tokens: map[string]string{}}
	api, err := New(e.apiConfig())
	if err != nil {
		t.Fatal(err)
	}
	e.api, e.h = api, apitest.Wrap(t, api)
	return e
}

// apiConfig is the server's configuration on the env's services (no VM routes).
func (e *testEnv) apiConfig() Config {
	// The notification targets' use cases (issue 24), with the env's key file.
	sealer, err := seal.New(bytes.Repeat([]byte{5}, seal.KeySize))
	if err != nil {
		e.t.Fatal(err)
	}
	notifications := notify.NewService(e.store, sealer, e.trail,
		notify.NewSender(notify.SenderConfig{Store: e.store, Sealer: sealer, Owner: "httpapi-test"}), nil)
	return Config{Sessions: e.auth, Accounts: e.accounts, Audit: e.trail, Store: e.store, Fleet: e.fleet,
		Identity:      identity.NewAdmin(e.store.(identity.AdminStore), e.accounts, e.trail.Record),
		Notifications: notifications}
}

// addSim starts the dev cluster and registers it as name through the fleet.
func (e *testEnv) addSim(name string) *envSim {
	e.t.Helper()
	c := pvesim.DevCluster(pvesim.Options{Speed: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := c.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cancel(); srv.Close() })
	s := &envSim{c: c, srv: srv, eps: srv.Endpoints()}
	s.tokenID, s.secret, _ = strings.Cut(c.DevToken(), "=")
	cl, err := e.fleet.Register(context.Background(), s.spec(name))
	if err != nil {
		e.t.Fatal(err)
	}
	s.id = cl.ID
	e.sims[name] = s
	return s
}

func pvesimVM(vmid int, node string) pvesim.VMSpec {
	return pvesim.VMSpec{VMID: vmid, Node: node, Running: vmid%2 == 0, Tags: "bulk"}
}

func (s *envSim) spec(name string) fleet.ClusterSpec {
	return fleet.ClusterSpec{Name: name, Endpoints: []string{s.eps[0].URL}, TokenID: s.tokenID, TokenSecret: s.secret,
		TLSFingerprint: s.eps[0].Fingerprint}
}

// requests counts every request the emulated clusters received.
func (e *testEnv) simRequests() int {
	n := 0
	for _, s := range e.sims {
		for _, rt := range pvesim.Routes() {
			n += s.c.Requests(rt.Method, rt.Path)
		}
		for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
			n += s.c.Requests(m, "(unknown)")
		}
	}
	return n
}

// addUser creates a user and logs in.
func (e *testEnv) addUser(name, role string) accounts.User {
	e.t.Helper()
	ctx := context.Background()
	email := name + "@example.org"
	u, err := e.accounts.CreateUser(ctx, setupAdmin, accounts.NewUser{Email: email, Nickname: name, Password: envPassword, Role: role})
	if err != nil {
		e.t.Fatal(err)
	}
	tok, _, err := e.accounts.Login(ctx, email, envPassword, "192.0.2.1")
	if err != nil {
		e.t.Fatal(err)
	}
	e.users[name], e.tokens[name] = u, tok.Raw
	return u
}

func (e *testEnv) grant(user, sim, role string) {
	e.t.Helper()
	if _, err := e.fleet.PutGrant(context.Background(), setupActor, e.users[user].ID, e.sims[sim].id, role); err != nil {
		e.t.Fatal(err)
	}
}

// do sends a request as user ("" = no token).
func (e *testEnv) do(user, method, path, body string) *httptest.ResponseRecorder {
	e.t.Helper()
	return e.doWith(e.h, user, method, path, body)
}

func (e *testEnv) doWith(h http.Handler, user, method, path, body string) *httptest.ResponseRecorder {
	e.t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if user != "" {
		r.Header.Set("Authorization", "Bearer "+e.tokens[user])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// envelopeOf decodes an answer's envelope.
func envelopeOf(t testing.TB, w *httptest.ResponseRecorder) (env struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Reason  string          `json:"reason"`
	Data    json.RawMessage `json:"data"`
}) {
	t.Helper()
	if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, w.Body)
	}
	if env.Code != w.Code {
		t.Fatalf("envelope code %d, status %d", env.Code, w.Code)
	}
	return env
}

// lastAudit returns the newest audit record, after writing the denials the trail
// is still counting (a session's repeated denials in a minute are folded into a
// counted row that carries the last one's attribution).
func (e *testEnv) lastAudit() audit.Entry {
	e.t.Helper()
	e.trail.Flush(context.Background())
	recs, err := e.trail.List(context.Background(), 1, 0)
	if err != nil || len(recs) == 0 {
		e.t.Fatalf("no audit record (%v)", err)
	}
	return recs[0]
}

// needAdmin marks an action only global admins may take.
const needAdmin = "admin"

// matrixAction is one row of the authorization matrix. In path and body, {c} is the
// cluster id and {dave} the id of a user no action is about otherwise.
type matrixAction struct {
	name   string
	method string
	path   string
	body   string
	need   string // needAdmin, fleet.GrantViewer or fleet.GrantOperator
	ok     []int  // statuses that mean "allowed" (default 200)
}

// matrixActions are the actions the matrix tries. Order matters where an action
// changes state: the grant PUT comes before its DELETE.
var matrixActions = []matrixAction{
	{name: "nodes", method: "GET", path: "/api/v1/pve/clusters/{c}/nodes", need: fleet.GrantViewer},
	{name: "vms", method: "GET", path: "/api/v1/pve/clusters/{c}/vms", need: fleet.GrantViewer},
	{name: "vm status", method: "GET", path: "/api/v1/pve/vm/{c}/pve1/100", need: fleet.GrantViewer},
	{name: "get cluster", method: "GET", path: "/api/v1/clusters/{c}", need: needAdmin},
	{name: "rename cluster", method: "PATCH", path: "/api/v1/clusters/{c}", body: `{"name":"c{c}"}`, need: needAdmin},
	{name: "put grant", method: "PUT", path: "/api/v1/clusters/{c}/grants/{dave}", body: `{"role":"viewer"}`, need: needAdmin},
	{name: "delete grant", method: "DELETE", path: "/api/v1/clusters/{c}/grants/{dave}", need: needAdmin},
}

// matrixUser is a user of the matrix with their grants by cluster name.
type matrixUser struct {
	name   string
	admin  bool
	grants map[string]string
}

var matrixUsers = []matrixUser{
	{name: "admin", admin: true},
	{name: "alice", grants: map[string]string{"A": fleet.GrantOperator, "B": fleet.GrantViewer}},
	{name: "bob", grants: map[string]string{"A": fleet.GrantViewer}},
	{name: "carol"}, // no grant at all
}

// expectStatus is what the matrix expects of user taking action on cluster
// ("missing" for one that does not exist); 0 means "allowed".
func expectStatus(a matrixAction, u matrixUser, cluster string) int {
	missing := cluster == "missing"
	switch {
	case a.need == needAdmin && !u.admin:
		return http.StatusForbidden
	case missing:
		return http.StatusNotFound
	case u.admin:
		return 0
	}
	role := u.grants[cluster]
	switch {
	case role == "":
		return http.StatusNotFound
	case a.need == fleet.GrantOperator && role != fleet.GrantOperator:
		return http.StatusForbidden
	}
	return 0
}

// newMatrixEnv builds the matrix's world: clusters A and B, a missing cluster,
// the users and their grants, and dave (the object of grant changes).
func newMatrixEnv(t *testing.T) (*testEnv, map[string]int64) {
	e := newTestEnv(t)
	e.addSim("A")
	e.addSim("B")
	for _, u := range matrixUsers {
		role := accounts.RoleUser
		if u.admin {
			role = accounts.RoleAdmin
		}
		e.addUser(u.name, role)
	}
	for _, u := range matrixUsers {
		for cluster, role := range u.grants {
			e.grant(u.name, cluster, role)
		}
	}
	e.addUser("dave", accounts.RoleUser)
	return e, map[string]int64{"A": e.sims["A"].id, "B": e.sims["B"].id, "missing": 4242}
}

func TestMatrix(t *testing.T) {
	e, clusters := newMatrixEnv(t)
	runMatrix(t, e, clusters, matrixActions)
}

// runMatrix takes every action as every matrix user on clusters A, B and a missing
// one, and checks: the status the grant allows (expectStatus); a denial reaches no
// PVE, is audited with who, where and result, and as a 404 is byte-identical to a
// missing cluster's; an admin-only 403 does not tell clusters apart; an allowed 404
// (a task nobody knows) does not pass for "cluster not found".
func runMatrix(t *testing.T, e *testEnv, clusters map[string]int64, actions []matrixAction) {
	t.Helper()
	canonical := e.do("carol", "GET", "/api/v1/pve/clusters/4242/nodes", "").Body.Bytes()
	if !bytes.Contains(canonical, []byte(`"cluster not found"`)) {
		t.Fatalf("missing cluster answers %s", canonical)
	}
	forbiddenAdmin := map[string][]byte{} // action → the 403 body of a non-admin
	dave := strconv.FormatInt(e.users["dave"].ID, 10)
	for _, a := range actions {
		for _, u := range matrixUsers {
			for _, cname := range []string{"A", "B", "missing"} {
				fill := strings.NewReplacer("{c}", strconv.FormatInt(clusters[cname], 10), "{dave}", dave)
				want := expectStatus(a, u, cname)
				label := fmt.Sprintf("%s as %s on %s", a.name, u.name, cname)

				before := e.simRequests()
				w := e.do(u.name, a.method, fill.Replace(a.path), fill.Replace(a.body))
				after := e.simRequests()

				if want == 0 {
					ok := a.ok
					if ok == nil {
						ok = []int{http.StatusOK}
					}
					if !slices.Contains(ok, w.Code) || (w.Code == http.StatusNotFound && bytes.Equal(w.Body.Bytes(), canonical)) {
						t.Errorf("%s: %d %s, want one of %v", label, w.Code, w.Body, ok)
					}
					continue
				}
				if w.Code != want {
					t.Errorf("%s: %d %s, want %d", label, w.Code, w.Body, want)
					continue
				}
				if after != before {
					t.Errorf("%s: denied, yet the cluster received %d requests", label, after-before)
				}
				if want == http.StatusNotFound && !bytes.Equal(w.Body.Bytes(), canonical) {
					t.Errorf("%s: 404 body %s differs from a missing cluster's %s", label, w.Body, canonical)
				}
				if want == http.StatusForbidden && a.need == needAdmin {
					if prev, seen := forbiddenAdmin[a.name]; seen && !bytes.Equal(prev, w.Body.Bytes()) {
						t.Errorf("%s: the 403 tells clusters apart: %s vs %s", label, w.Body, prev)
					}
					forbiddenAdmin[a.name] = w.Body.Bytes()
				}
				if u.admin {
					continue // a missing cluster, not a denial
				}
				rec := e.lastAudit()
				if rec.Action != "access.denied" || rec.Result != "denied" || rec.UserID != e.users[u.name].ID || rec.Address == "" {
					t.Errorf("%s: denial not audited as who, where, result: %+v", label, rec)
				}
				if a.need != needAdmin && rec.ClusterID != clusters[cname] {
					t.Errorf("%s: denial audited on cluster %d", label, rec.ClusterID)
				}
			}
		}
	}
}

// TestMatrixClusterList: each user lists exactly the clusters they hold a grant on.
func TestMatrixClusterList(t *testing.T) {
	e, clusters := newMatrixEnv(t)
	for _, u := range matrixUsers {
		w := e.do(u.name, "GET", "/api/v1/pve/clusters", "")
		env := envelopeOf(t, w)
		var got []struct {
			ID     int64  `json:"id"`
			Name   string `json:"name"`
			Role   string `json:"role"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal(env.Data, &got); err != nil || w.Code != 200 {
			t.Fatalf("%s: %d %s", u.name, w.Code, w.Body)
		}
		var want []string
		for _, name := range []string{"A", "B"} {
			switch {
			case u.admin:
				want = append(want, fmt.Sprintf("%d %s admin", clusters[name], name))
			case u.grants[name] != "":
				want = append(want, fmt.Sprintf("%d %s %s", clusters[name], name, u.grants[name]))
			}
		}
		var have []string
		for _, c := range got {
			have = append(have, fmt.Sprintf("%d %s %s", c.ID, c.Name, c.Role))
			if c.Status == "" {
				t.Errorf("%s: cluster %d has no status", u.name, c.ID)
			}
		}
		if strings.Join(have, "|") != strings.Join(want, "|") {
			t.Errorf("%s sees %v, want %v", u.name, have, want)
		}
	}
}
