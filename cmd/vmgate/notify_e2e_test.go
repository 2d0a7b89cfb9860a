package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
)

// hookReceiver is a webhook receiver for the end-to-end tests: it verifies every
// signature and records the event ids and kinds it took.
type hookReceiver struct {
	srv    *httptest.Server
	secret []byte

	mu     sync.Mutex
	status int // answered instead of taking (0: take)
	ids    []string
	kinds  []string
	bad    []string
}

func newHookReceiver(t *testing.T, secret string) *hookReceiver {
	h := &hookReceiver{secret: []byte(secret)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.status != 0 {
			w.WriteHeader(h.status)
			return
		}
		if err := notify.Verify(h.secret, r.Header.Get(notify.SignatureHeader), body, time.Now(), notify.ReplayWindow); err != nil {
			h.bad = append(h.bad, err.Error())
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev struct {
			Kind string `json:"kind"`
		}
		_ = json.Unmarshal(body, &ev)
		h.ids = append(h.ids, r.Header.Get(notify.EventIDHeader))
		h.kinds = append(h.kinds, ev.Kind)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) setStatus(code int) {
	h.mu.Lock()
	h.status = code
	h.mu.Unlock()
}

func (h *hookReceiver) got() (ids, kinds, bad []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ids), slices.Clone(h.kinds), slices.Clone(h.bad)
}

// walkNotifications exercises every notification route once, as an admin, for
// TestEveryOperationOnRealBinary: a target made, read, changed, tested; an event
// the receiver refuses, dead-lettered and retried; the target deleted. dir is
// the server's data directory (its SQLite database takes the event).
func walkNotifications(t *testing.T, ctx context.Context, admin *client.Client, dir string, must func(string, error)) {
	t.Helper()
	rcv := newHookReceiver(t, "walk-every-route-key")
	tg, err := admin.CreateNotifyTarget(ctx, client.NotifyTargetCreate{Name: "walk", Kind: "webhook",
		Endpoint: rcv.srv.URL + "/hook", Secret: "walk-every-route-key", Filters: &client.NotifyFilters{Severity: "info"}})
	must("create a notification target", err)
	_, err = admin.NotifyTargets(ctx)
	must("notification targets", err)
	_, err = admin.NotifyTarget(ctx, tg.ID)
	must("a notification target", err)
	rate := 60
	_, err = admin.UpdateNotifyTarget(ctx, tg.ID, client.NotifyTargetPatch{RatePerMinute: &rate})
	must("change a notification target", err)
	res, err := admin.TestNotifyTarget(ctx, tg.ID)
	must("test a notification target", err)
	if !res.Delivered {
		t.Fatalf("the test was not delivered: %+v", res)
	}
	rcv.setStatus(http.StatusGone)
	enqueue(t, dir, 1)
	var dead client.NotifyDelivery
	testkit.Until(t, "the refused event dead-lettered", func() bool {
		l, err := admin.NotifyDeliveries(ctx, client.NotifyDeliveryFilter{TargetID: tg.ID, State: "dead"})
		must("deliveries", err)
		if len(l.Items) == 0 {
			return false
		}
		dead = l.Items[0]
		return true
	})
	rcv.setStatus(0)
	_, err = admin.RetryNotifyDelivery(ctx, dead.ID)
	must("retry a dead letter", err)
	testkit.Until(t, "the retried event delivered", func() bool {
		ids, _, _ := rcv.got()
		return slices.Contains(ids, strconv.FormatInt(dead.EventID, 10))
	})
	must("delete a notification target", admin.DeleteNotifyTarget(ctx, tg.ID))
}

// enqueue writes n events to the outbox of the server whose data directory is
// dir, as a cause without a transaction of its own would (SQLite takes a second
// process's writes).
func enqueue(t *testing.T, dir string, n int) {
	t.Helper()
	st, err := store.Open(t.Context(), "sqlite://"+filepath.Join(dir, "vmgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs := make([]store.NotifyEvent, n)
	for i := range evs {
		evs[i] = store.NotifyEvent{Kind: notify.EventNodeOffline, Severity: notify.SeverityError, ClusterID: 1,
			Subject: "node pve" + strconv.Itoa(i) + " is offline", Link: "/fleet", At: time.Now()}
	}
	if err := st.EnqueueNotifications(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
}

// TestNotificationsOnRealBinary (docs/security.md item 44): an admin adds a webhook target; its secret is
// never in an answer; a lockout of logins reaches the receiver, signed; an API
// token cannot change targets.
func TestNotificationsOnRealBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const pw = "notify the lantern keeper"
	createAdmin(t, dir, "root@example.com", pw)
	srv := start(t, nil, "server", "--data-dir", dir, "--listen", "127.0.0.1:0", "--no-notify-health")
	base := srv.line(t, listening)[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := checkedClient(t, base, "")
	if _, err := admin.Login(ctx, "root@example.com", pw); err != nil {
		t.Fatal(err)
	}
	const secret = "a-secret-the-api-never-returns"
	rcv := newHookReceiver(t, secret)
	tg, err := admin.CreateNotifyTarget(ctx, client.NotifyTargetCreate{Name: "security", Kind: "webhook",
		Endpoint: rcv.srv.URL, Secret: secret, Filters: &client.NotifyFilters{Events: []string{"auth.lockout"}}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := admin.NotifyTargets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range append(list.Raw, tg.JSON()) {
		if strings.Contains(string(raw), secret) || !strings.Contains(string(raw), `"hasSecret":true`) {
			t.Fatalf("a target's answer: %s", raw)
		}
	}
	// An API token, even an admin's, changes no target.
	tok, err := admin.CreateToken(ctx, client.TokenCreate{Name: "script", ExpiresInDays: 1})
	if err != nil {
		t.Fatal(err)
	}
	script := checkedClient(t, base, tok.Token)
	if _, err := script.CreateNotifyTarget(ctx, client.NotifyTargetCreate{Name: "x", Kind: "webhook", Endpoint: rcv.srv.URL,
		Secret: "k"}); status(err) != http.StatusForbidden {
		t.Fatalf("a target made with an API token: %v", err)
	}
	// Wrong passwords until the account is locked out.
	guest := checkedClient(t, base, "")
	testkit.Until(t, "auth.lockout at the receiver", func() bool {
		_, _ = guest.Login(ctx, "root@example.com", "not the password at all")
		_, kinds, _ := rcv.got()
		return slices.Contains(kinds, notify.EventAuthLockout)
	})
	if _, _, bad := rcv.got(); len(bad) > 0 {
		t.Fatalf("signatures refused: %v", bad)
	}
	// The receiver has the event; the sender records the delivery once the
	// receiver's answer is back, a moment later.
	testkit.Until(t, "the lockout's delivery recorded", func() bool {
		ds, err := admin.NotifyDeliveries(ctx, client.NotifyDeliveryFilter{State: "delivered"})
		if err != nil {
			t.Fatalf("deliveries: %v", err)
		}
		return len(ds.Items) > 0 && ds.Items[0].Kind == notify.EventAuthLockout
	})

	// The command line: vmgate notify target list|add|test|rm, deliveries.
	env := cliEnv(t)
	runCLI(t, env, pw+"\n", "login", "--server", base, "--email", "root@example.com").want(t, 0, "login")
	runCLI(t, env, "cli-secret\n", "notify", "target", "add", "from-cli", "webhook", rcv2(t).srv.URL, "--secret-stdin",
		"--event", "task.failed", "--severity", "warning", "--rate", "10", "-o", "table").want(t, 0, "notify target add")
	r := runCLI(t, env, "", "notify", "target", "list", "-o", "table").want(t, 0, "notify target list")
	if names := column(t, r.stdout, "NAME"); !slices.Equal(names, []string{"from-cli", "security"}) || strings.Contains(r.stdout, "cli-secret") {
		t.Fatalf("notify target list:\n%s", r.stdout)
	}
	r = runCLI(t, env, "", "notify", "target", "test", "from-cli", "-o", "table").want(t, 0, "notify target test")
	if got := column(t, r.stdout, "DELIVERED"); len(got) != 1 || got[0] != "yes" {
		t.Fatalf("notify target test:\n%s", r.stdout)
	}
	runCLI(t, env, "", "notify", "deliveries", "--state", "delivered", "-o", "table").want(t, 0, "notify deliveries")
	runCLI(t, env, "", "notify", "target", "rm", "from-cli").want(t, 0, "notify target rm")
	runCLI(t, env, "", "notify", "target", "test", "from-cli").want(t, 2, "a removed target")
}

// rcv2 is a second receiver, with the CLI's secret.
func rcv2(t *testing.T) *hookReceiver { return newHookReceiver(t, "cli-secret") }

// TestNotificationsSurviveKill9: 100 events wait while their receiver is down;
// vmgate is killed with SIGKILL; after a restart every one arrives, in order.
func TestNotificationsSurviveKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const pw = "kill the sender not the mail"
	createAdmin(t, dir, "root@example.com", pw)
	args := []string{"server", "--data-dir", dir, "--listen", "127.0.0.1:0", "--no-notify-health",
		"--notify-first-retry", "200ms", "--notify-lease", "2s"}
	srv := start(t, nil, args...)
	base := srv.line(t, listening)[1]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := checkedClient(t, base, "")
	if _, err := admin.Login(ctx, "root@example.com", pw); err != nil {
		t.Fatal(err)
	}
	rcv := newHookReceiver(t, "k")
	rcv.setStatus(http.StatusServiceUnavailable)
	tg, err := admin.CreateNotifyTarget(ctx, client.NotifyTargetCreate{Name: "hook", Kind: "webhook", Endpoint: rcv.srv.URL, Secret: "k"})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, dir, 100)
	testkit.Until(t, "100 deliveries pending, the first tried", func() bool {
		l, err := admin.NotifyDeliveries(ctx, client.NotifyDeliveryFilter{TargetID: tg.ID, State: "pending", Limit: 500})
		if err != nil || len(l.Items) != 100 {
			return false
		}
		return l.Items[len(l.Items)-1].Attempts > 0 // newest first: the last is the head
	})
	srv.cmd.Process.Kill()
	srv.cmd.Wait()
	rcv.setStatus(0)
	start(t, nil, args...).line(t, listening)
	testkit.Until(t, "the 100 events at the receiver", func() bool {
		ids, _, _ := rcv.got()
		return len(ids) >= 100
	})
	ids, _, bad := rcv.got()
	if len(bad) > 0 {
		t.Fatalf("signatures refused: %v", bad)
	}
	for i := 1; i < len(ids); i++ {
		a, _ := strconv.Atoi(ids[i-1])
		b, _ := strconv.Atoi(ids[i])
		if b <= a {
			t.Fatalf("out of order after the restart: %v", ids)
		}
	}
}
