package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
)

// probeCount counts the store's write probes.
type probeCount struct {
	store.Store
	n atomic.Int32
}

func (p *probeCount) ProbeWrite(ctx context.Context) error {
	p.n.Add(1)
	return p.Store.ProbeWrite(ctx)
}

// stepClock is a clock a test moves.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// readyAnswer is /readyz's answer: status, reason, dependency and message.
func readyAnswer(t *testing.T, h *testing.T, srv *Server) (int, string, string, string, string) {
	t.Helper()
	w := httptest.NewRecorder()
	apitest.Wrap(h, srv).ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	var body struct {
		Reason     string `json:"reason"`
		Dependency string `json:"dependency"`
		Message    string `json:"message"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("/readyz: %s", w.Body)
	}
	return w.Code, body.Reason, body.Dependency, body.Message, w.Header().Get("Retry-After")
}

// TestReadyzWritesToTheStore: /readyz writes to the store at most once every
// ReadyWriteProbe (the checks in between answer with the last result) and,
// once a write fails on a full disk, answers 503 store_unwritable naming the
// store, saying why, with Retry-After; once space is freed, 200 again at the
// next probe.
func TestReadyzWritesToTheStore(t *testing.T) {
	t.Parallel()
	st, ballast := storetest.OpenFullableSQLite(t, filepath.Join(t.TempDir(), "ready.db"), 64, store.Options{})
	probes := &probeCount{Store: st}
	clock := &stepClock{now: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	srv, err := New(Config{Store: probes, Now: clock.Now, ReadyWriteProbe: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ready := func(want int, reason string) (string, string) {
		t.Helper()
		code, got, dep, msg, retry := readyAnswer(t, t, srv)
		if code != want || got != reason || (code == 503 && (dep != "store" || retry == "")) {
			t.Fatalf("/readyz: %d %s (dependency %q, Retry-After %q): %s; want %d %s", code, got, dep, retry, msg, want, reason)
		}
		return msg, retry
	}
	ready(200, "")
	ready(200, "")
	if n := probes.n.Load(); n != 1 {
		t.Fatalf("two checks within 5 s probed %d times, want once", n)
	}
	ballast.Fill()
	ready(200, "") // the last probe's result, a second old
	clock.Advance(5 * time.Second)
	msg, _ := ready(503, errs.ReasonStoreUnwritable)
	if !strings.Contains(msg, "does not take writes") || !strings.Contains(msg, "disk is full") {
		t.Errorf("/readyz with a full disk says %q", msg)
	}
	ballast.Empty()
	ready(503, errs.ReasonStoreUnwritable)
	clock.Advance(5 * time.Second)
	ready(200, "")
	if n := probes.n.Load(); n != 3 {
		t.Errorf("%d probes over three 5-second periods, want 3", n)
	}
}

// TestStoreFullAPI: with vmgate's database disk full, a VM start is 503
// store_full with a message an operator can act on and Retry-After, before PVE
// is asked; the log says the same with the file; reads go on; logins that fail
// on the store do not use up the client's login attempts; the refused start's
// audit record is kept and written once space is freed, and the start then
// goes through.
func TestStoreFullAPI(t *testing.T) {
	t.Parallel()
	var logs syncLog
	path := filepath.Join(t.TempDir(), "full.db")
	st, ballast := storetest.OpenFullableSQLite(t, path, 4096, store.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const burst = 4 // the env logs its four users in from 192.0.2.1
	te := newTestEnvOnStore(t, st, auth.Config{Argon2: auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		PerAddressRate: rate.Every(time.Hour), PerAddressBurst: burst})
	e := newVMEnvOf(t, te, pvesim.Options{Speed: 1000})
	vm := e.vmPath("pve1", 101) // stopped
	e.call("view", "GET", vm, "").expect(t, 200, "")

	ballast.Fill()
	fillUp(t, st, e.cid, e.users["op"].ID)
	a := e.call("op", "POST", vm+"/start", "").expect(t, 503, errs.ReasonStoreFull)
	if !strings.Contains(a.env.Message, "vmgate's database disk is full") || !strings.Contains(a.env.Message, "free space") ||
		a.header.Get("Retry-After") == "" {
		t.Errorf("the refused start: %s (Retry-After %q)", a.raw, a.header.Get("Retry-After"))
	}
	if n := e.dev.Requests("POST", "/nodes/{node}/qemu/{vmid}/status/start"); n != 0 {
		t.Errorf("PVE got %d start POSTs while vmgate could not record them", n)
	}
	if !strings.Contains(logs.String(), "vmgate's database disk is full: free space on the disk holding "+path) {
		t.Errorf("the log does not say the disk is full, naming %s:\n%s", path, logs.String())
	}
	e.call("view", "GET", vm, "").expect(t, 200, "")
	login := `{"email":"op@example.org","password":"` + envPassword + `"}`
	for range burst + 2 { // from the test's own address; the env's users logged in from another
		e.call("", "POST", "/api/v1/user/login", login).expect(t, 503, errs.ReasonStoreFull)
	}
	if n := e.trail.Spooled(); n == 0 {
		t.Fatal("the refused start's audit record was not kept")
	}

	ballast.Empty()
	e.trail.Flush(context.Background())
	recs, err := e.trail.Query(context.Background(), audit.Filter{Action: "vm.start"})
	if err != nil || len(recs) != 1 || recs[0].Result != errs.ReasonStoreFull || recs[0].UserEmail != "op@example.org" {
		t.Fatalf("the refused start's audit record after the disk was freed: %+v %v", recs, err)
	}
	e.call("", "POST", "/api/v1/user/login", login).expect(t, 200, "")
	e.call("op", "POST", vm+"/start?wait=30", "").expect(t, 200, "")
}

// TestStoreReadOnlyAPI: a replica on a PostgreSQL database that refuses writes
// (default_transaction_read_only, as a standby) serves reads, answers a write
// 503 store_read_only with Retry-After, and is not ready (store_unwritable);
// the replica on the writable database is.
func TestStoreReadOnlyAPI(t *testing.T) {
	storetest.PostgresDSN(t)
	t.Parallel()
	dsn := storetest.FreshSchema(t)
	cfg := auth.Config{Argon2: auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16}, PerAddressRate: rate.Inf,
		PerAddressBurst: 1}
	rw := newTestEnvOn(t, dsn, cfg)
	rw.addUser("root", "admin")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_transaction_read_only", "on")
	u.RawQuery = q.Encode()
	ro := newTestEnvOn(t, u.String(), cfg)
	ro.tokens["root"] = rw.tokens["root"]

	if w := ro.do("root", "GET", "/api/v1/users", ""); w.Code != 200 {
		t.Fatalf("a read on the read-only replica: %d %s", w.Code, w.Body)
	}
	w := ro.do("root", "POST", "/api/v1/users",
		`{"email":"new@example.org","nickname":"n","password":"another-Fine-passphrase-43","role":"user"}`)
	env := envelopeOf(t, w)
	if w.Code != 503 || env.Reason != errs.ReasonStoreReadOnly || !strings.Contains(env.Message, "read-only") ||
		w.Header().Get("Retry-After") == "" {
		t.Fatalf("a write on the read-only replica: %d %s", w.Code, w.Body)
	}
	if n := ro.trail.Spooled(); n == 0 {
		t.Error("the refused write's audit record was not kept")
	}
	code, reason, _, msg, _ := readyAnswer(t, t, ro.api)
	if code != 503 || reason != errs.ReasonStoreUnwritable || !strings.Contains(msg, "read-only") {
		t.Errorf("/readyz of the read-only replica: %d %s %q", code, reason, msg)
	}
	if code, reason, _, _, _ := readyAnswer(t, t, rw.api); code != 200 {
		t.Errorf("/readyz of the writable replica: %d %s", code, reason)
	}
}

// fillUp writes rows like the ones a VM start and a login write (a task row,
// an audit record, a session) until the store refuses each: with the disk full,
// the pages they would go to are full too, and the next such write fails.
func fillUp(t *testing.T, st store.Store, clusterID, userID int64) {
	t.Helper()
	ctx := context.Background()
	for name, write := range map[string]func(i int) error{
		"task rows": func(int) error {
			_, err := st.CreateTask(ctx, store.Task{ClusterID: clusterID, UserID: userID, UserEmail: "op@example.org",
				Op: "start", Node: "pve1", VMID: 101, Params: "{}"})
			return err
		},
		"audit records": func(int) error {
			_, err := st.AppendAudit(ctx, store.AuditRecord{At: time.Now(), UserID: userID, UserEmail: "op@example.org",
				Action: "x.fill", ClusterID: clusterID, Node: "pve1", VMID: 101, Result: "ok", Address: "127.0.0.1"})
			return err
		},
		"sessions": func(i int) error {
			return st.CreateSession(ctx, store.Session{ID: fmt.Sprintf("%043d", i), UserID: userID, CreatedAt: time.Now(),
				ExpiresAt: time.Now().Add(time.Hour), RotatedAt: time.Now(), Address: "127.0.0.1", UserAgent: "Go-http-client/1.1"})
		},
	} {
		for i := 0; ; i++ {
			err := write(i)
			if err == nil {
				if i == 10_000 {
					t.Fatalf("10 000 %s written into a full database", name)
				}
				continue
			}
			if errs.KindOf(err) != errs.Unavailable {
				t.Fatalf("filling up %s: %v", name, err)
			}
			break
		}
	}
}

// syncLog is a log destination safe for concurrent writes.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
