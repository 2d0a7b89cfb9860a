package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/idempotency"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The VM operations' tests run the whole stack over real HTTP on loopback: the
// real server, SQLite store, auth and fleet, and the emulator's dev cluster
// (docs/design.md §7) registered through the fleet over HTTPS.

// vmPoll is the task poll interval in these tests.
const vmPoll = 10 * time.Millisecond

// stillSpeed is an emulator speed at which its clock all but stands still (an
// emulated second lasts some thirty real years): a task started at it stays
// where it is until the test sets a real speed, however slow the machine. A
// manual clock does that too, but cannot be set going again (issue 17,
// docs/history.md).
const stillSpeed = 1e-9

// vmEnv is the stack with the dev cluster registered as cluster "dev", the users
// root (admin), op (operator on dev), view (viewer on dev) and nobody (no grant).
type vmEnv struct {
	*testEnv
	dev *pvesim.Cluster
	cid int64 // the dev cluster's id
	svc *vmops.Service
	ops *operations.Service // operations on many VMs (driven without Run: see opsEnv)
	// keys keeps the Idempotency-Keys (without Run: a test that wants the
	// sweep of dead holders' keys runs it).
	keys *idempotency.Keeper
	srv  *httptest.Server
}

func newVMEnv(t testing.TB, speed float64) *vmEnv {
	t.Helper()
	return newVMEnvWith(t, pvesim.Options{Speed: speed})
}

// newVMEnvWith is newVMEnv with the emulator's options (its PVE version, ...).
func newVMEnvWith(t testing.TB, opts pvesim.Options) *vmEnv {
	t.Helper()
	return newVMEnvOf(t, newTestEnv(t), opts)
}

// newVMEnvOf is newVMEnvWith on a test env of the caller's.
func newVMEnvOf(t testing.TB, te *testEnv, opts pvesim.Options) *vmEnv {
	t.Helper()
	e := &vmEnv{testEnv: te}
	opts.ClusterName = "dev"
	e.dev = pvesim.DevCluster(opts)
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := e.dev.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); srv.Close() })
	ep := srv.Endpoints()[0]
	tokenID, secret, _ := strings.Cut(e.dev.DevToken(), "=")
	cl, err := e.fleet.Register(ctx, fleet.ClusterSpec{Name: "dev", Endpoints: []string{ep.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: ep.Fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	e.cid = cl.ID
	e.addUser("root", accounts.RoleAdmin)
	for _, u := range []struct{ name, role string }{{"op", fleet.GrantOperator}, {"view", fleet.GrantViewer}, {"nobody", ""}} {
		e.addUser(u.name, accounts.RoleUser)
		if u.role != "" {
			if _, err := e.fleet.PutGrant(ctx, setupActor, e.users[u.name].ID, e.cid, u.role); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.start(nil)
	return e
}

// start (re)builds the VM service, the keeper of Idempotency-Keys and the HTTP
// server on the env's store, wired as cmd/vmgate wires them, as a (re)started
// vmgate process would. The keeper takes the tweaked service's store and clock.
// The previous service is not closed.
func (e *vmEnv) start(tweak func(*vmops.Config)) {
	e.t.Helper()
	var keys *idempotency.Keeper
	cfg := vmops.Config{Store: e.store, Clients: e.fleet, Audit: e.trail, PollInterval: vmPoll, HAGrace: 10 * time.Second,
		Sweep: 20 * time.Millisecond, KeySettled: func(ctx context.Context, userID int64, key string) {
			keys.Settle(ctx, idempotency.Key{UserID: userID, Name: key})
		}}
	if tweak != nil {
		tweak(&cfg)
	}
	e.svc = vmops.New(cfg)
	e.t.Cleanup(e.svc.Close)
	e.ops = operations.New(e.svc, operations.Config{Store: e.store, Audit: e.trail, Scan: 20 * time.Millisecond})
	e.t.Cleanup(e.ops.Close)
	keys = idempotency.New(idempotency.Config{Store: cfg.Store, Now: cfg.Now, Settle: KeyOutcomes(e.svc, e.ops)})
	e.t.Cleanup(keys.Close)
	e.keys = keys
	apiCfg := e.apiConfig()
	apiCfg.VMs, apiCfg.Operations, apiCfg.Keys = e.svc, e.ops, e.keys
	api, err := New(apiCfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.api = api
	e.srv = apitest.NewServer(e.t, api)
}

// answer is a decoded HTTP answer.
type answer struct {
	status int
	header http.Header
	raw    []byte
	env    struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Reason  string          `json:"reason"`
		Data    json.RawMessage `json:"data"`
		TaskID  string          `json:"taskId"`
	}
}

// call sends a request over HTTP as user with optional extra headers ("Name: value").
func (e *vmEnv) call(user, method, path, body string, headers ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+e.tokens[user])
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	a.raw, _ = io.ReadAll(resp.Body)
	if err := json.Unmarshal(a.raw, &a.env); err != nil {
		e.t.Fatalf("%s %s: answer is not JSON: %s", method, path, a.raw)
	}
	if a.env.Code != a.status {
		e.t.Fatalf("%s %s: envelope code %d, status %d", method, path, a.env.Code, a.status)
	}
	return a
}

// expect checks an answer's status and reason.
func (a answer) expect(t testing.TB, status int, reason string) answer {
	t.Helper()
	if a.status != status || a.env.Reason != reason {
		t.Fatalf("answer %d %q (%s), want %d %q", a.status, a.env.Reason, a.raw, status, reason)
	}
	return a
}

// vmPath is the path of a VM of the dev cluster.
func (e *vmEnv) vmPath(node string, vmid int) string {
	return "/api/v1/pve/vm/" + itoa(e.cid) + "/" + node + "/" + itoa(int64(vmid))
}

// taskJSONOf decodes a task answer.
func taskJSONOf(t testing.TB, a answer) taskJSON {
	t.Helper()
	var v taskJSON
	if err := json.Unmarshal(a.env.Data, &v); err != nil || a.status != http.StatusOK {
		t.Fatalf("task answer %d %s", a.status, a.raw)
	}
	return v
}

// waitTask long-polls a task until it ends.
func (e *vmEnv) waitTask(user, upid string) taskJSON {
	e.t.Helper()
	var v taskJSON
	testkit.Eventually(e.t, "task "+upid+" ending", func() error {
		if v = taskJSONOf(e.t, e.call(user, "GET", taskPath(upid)+"?wait=10", "")); v.Status != "stopped" {
			return fmt.Errorf("%+v", v)
		}
		return nil
	})
	return v
}

// readEvents reads a server-sent event stream to its end: the event names and
// the data of the events named kind, decoded as V.
func readEvents[V any](t testing.TB, body io.Reader, kind string) (names []string, vs []V) {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
			names = append(names, event)
		case strings.HasPrefix(line, "data: ") && event == kind:
			var v V
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
			vs = append(vs, v)
		}
	}
	return names, vs
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
