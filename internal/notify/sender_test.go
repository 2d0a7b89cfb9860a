package notify_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/store"
)

// TestWebhookSignedInOrder (docs/security.md item 44): every request of a webhook is signed (the receiver
// verifies each against its clock and the replay window) and carries its event
// id; a target's events arrive in the order they happened.
func TestWebhookSignedInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rcv := newReceiver(t, "s3cret-hmac-key", e.clock.Now)
	e.target(notify.TargetSpec{Name: "hook", Kind: notify.KindWebhook, Endpoint: rcv.srv.URL + "/in", Secret: "s3cret-hmac-key"})
	e.events(20, notify.EventTaskFailed, notify.SeverityWarning)
	for range 40 {
		if e.step() == 0 {
			break
		}
	}
	ids, bodies, bad := rcv.got()
	if len(bad) > 0 {
		t.Fatalf("signatures refused: %v", bad)
	}
	if len(ids) != 20 {
		t.Fatalf("the receiver got %d events, want 20: %v", len(ids), ids)
	}
	for i := 1; i < len(ids); i++ {
		a, _ := strconv.Atoi(ids[i-1])
		b, _ := strconv.Atoi(ids[i])
		if b <= a {
			t.Fatalf("events out of order: %v", ids)
		}
	}
	first := decode(t, bodies[0])
	if first["id"] != float64(mustAtoi(t, ids[0])) || first["kind"] != notify.EventTaskFailed ||
		first["link"] != "https://vmgate.example/fleet" || first["subject"] != "event 0" {
		t.Errorf("the first body: %s", bodies[0])
	}
	// A signature made for another body, or too old, does not verify.
	sig := notify.Sign([]byte("s3cret-hmac-key"), e.clock.Now(), bodies[0])
	if err := notify.Verify([]byte("s3cret-hmac-key"), sig, append(bodies[0], ' '), e.clock.Now(), notify.ReplayWindow); err == nil {
		t.Error("a signature verified another body")
	}
	if err := notify.Verify([]byte("s3cret-hmac-key"), sig, bodies[0], e.clock.Now().Add(6*time.Minute), notify.ReplayWindow); err == nil {
		t.Error("a signature verified outside the replay window")
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReceiverDownTenMinutes: the receiver is down for 10 minutes of the
// emulated clock; every event is delivered after it returns, in order, each at
// least once, none dead-lettered; retries were spaced by the backoff, not every
// round.
func TestReceiverDownTenMinutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rcv := newReceiver(t, "k", e.clock.Now)
	rcv.setDown(true, 0)
	e.target(notify.TargetSpec{Name: "hook", Kind: notify.KindWebhook, Endpoint: rcv.srv.URL, Secret: "k"})
	e.target(notify.TargetSpec{Name: "hook-2", Kind: notify.KindWebhook, Endpoint: rcv.srv.URL + "/2", Secret: "k"})
	e.events(50, notify.EventNodeOffline, notify.SeverityError)
	attempts := 0
	for elapsed := time.Duration(0); elapsed < 10*time.Minute; elapsed += 5 * time.Second {
		e.step()
		e.advance(5 * time.Second)
	}
	for _, d := range e.deliveries(store.DeliveryPending) {
		attempts = max(attempts, d.Attempts)
		if d.LastStatus != 0 && d.LastStatus != http.StatusServiceUnavailable {
			t.Errorf("delivery %d: status %d", d.ID, d.LastStatus)
		}
	}
	// 30 s doubling (halved by the jitter of 0.5: 22.5 s, 45 s, ...) in 10 minutes: a handful, not 120.
	if attempts < 3 || attempts > 8 {
		t.Errorf("the head was tried %d times in 10 minutes, want the backoff's few", attempts)
	}
	rcv.setDown(false, 0)
	for elapsed := time.Duration(0); elapsed < 2*time.Hour; elapsed += 10 * time.Second {
		e.step()
		if len(e.deliveries(store.DeliveryPending)) == 0 {
			break
		}
		e.advance(10 * time.Second)
	}
	if left := e.deliveries(store.DeliveryPending); len(left) > 0 {
		t.Fatalf("%d deliveries still pending", len(left))
	}
	if dead := e.deliveries(store.DeliveryDead); len(dead) > 0 {
		t.Fatalf("%d dead letters: %s", len(dead), dead[0].LastError)
	}
	ids, _, bad := rcv.got()
	if len(bad) > 0 {
		t.Fatalf("signatures refused: %v", bad)
	}
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	if len(seen) != 50 {
		t.Fatalf("%d distinct events arrived, want 50", len(seen))
	}
	for id, n := range seen {
		if n != 2 { // two targets, each once (no lease ran out)
			t.Errorf("event %s arrived %d times, want once per target", id, n)
		}
	}
	checkOrderPerPath(t, rcv)
}

// checkOrderPerPath checks that each target (a path of the receiver) got its
// events in increasing order.
func checkOrderPerPath(t *testing.T, rcv *receiver) {
	t.Helper()
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	last := map[string]int{}
	for i, id := range rcv.ids {
		path := rcv.paths[i]
		n, _ := strconv.Atoi(id)
		if n <= last[path] {
			t.Fatalf("target %s: event %d after %d", path, n, last[path])
		}
		last[path] = n
	}
}

// TestRefusalIsNotRetried: a 4xx other than 408 and 429 is dead at once, with
// the receiver's reason; Retry sends it again once the receiver takes it. A
// 429 and a 408 are retried.
func TestRefusalIsNotRetried(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		dead   bool
	}{{http.StatusNotFound, true}, {http.StatusForbidden, true}, {http.StatusTooManyRequests, false},
		{http.StatusRequestTimeout, false}, {http.StatusBadGateway, false}} {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			rcv := newReceiver(t, "k", e.clock.Now)
			rcv.setDown(true, c.status)
			e.target(notify.TargetSpec{Name: "hook", Kind: notify.KindWebhook, Endpoint: rcv.srv.URL, Secret: "k"})
			e.events(1, notify.EventAuthLockout, notify.SeverityWarning)
			e.step()
			dead := e.deliveries(store.DeliveryDead)
			if !c.dead {
				if len(dead) != 0 {
					t.Fatalf("%d was dead-lettered: %s", c.status, dead[0].LastError)
				}
				return
			}
			if len(dead) != 1 || !strings.Contains(dead[0].LastError, "not retried") ||
				!strings.Contains(dead[0].LastError, "down for maintenance") || dead[0].LastStatus != c.status {
				t.Fatalf("dead letters: %+v", dead)
			}
			rcv.setDown(false, 0)
			if _, err := e.svc.Retry(t.Context(), admin, dead[0].ID); err != nil {
				t.Fatal(err)
			}
			e.step()
			if ids, _, _ := rcv.got(); len(ids) != 1 {
				t.Fatalf("after Retry the receiver got %v", ids)
			}
		})
	}
}

// TestGivenUpAfterADay: a receiver that never answers well dead-letters the
// delivery after 24 hours of retries, saying so; the next event goes on.
func TestGivenUpAfterADay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rcv := newReceiver(t, "k", e.clock.Now)
	rcv.setDown(true, 0)
	e.target(notify.TargetSpec{Name: "hook", Kind: notify.KindWebhook, Endpoint: rcv.srv.URL, Secret: "k"})
	e.events(1, notify.EventNodeOffline, notify.SeverityError)
	for elapsed := time.Duration(0); elapsed <= 25*time.Hour; elapsed += 5 * time.Minute {
		e.step()
		e.advance(5 * time.Minute)
	}
	dead := e.deliveries(store.DeliveryDead)
	if len(dead) != 1 || !strings.Contains(dead[0].LastError, "given up after 24h") {
		t.Fatalf("dead letters: %+v", dead)
	}
	if dead[0].Attempts > 40 {
		t.Errorf("%d attempts in a day: the backoff reaches an hour", dead[0].Attempts)
	}
}

// TestBurstFoldsIntoDigest: with 10 messages a minute, a burst of 1000 events
// arrives as 10 messages, the last a digest naming the 991 it holds; every
// event id is in exactly one message.
func TestBurstFoldsIntoDigest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rcv := newReceiver(t, "k", e.clock.Now)
	e.target(notify.TargetSpec{Name: "hook", Kind: notify.KindWebhook, Endpoint: rcv.srv.URL, Secret: "k", RatePerMinute: 10})
	e.events(1000, notify.EventTaskFailed, notify.SeverityWarning)
	for range 30 {
		e.step()
	}
	ids, bodies, _ := rcv.got()
	if len(ids) != 10 {
		t.Fatalf("%d messages, want 10", len(ids))
	}
	last := decode(t, bodies[9])
	if last["kind"] != "digest" || last["count"] != float64(991) || len(last["eventIds"].([]any)) != 991 {
		t.Fatalf("the last message: kind %v count %v", last["kind"], last["count"])
	}
	if !strings.HasPrefix(ids[9], "digest-") {
		t.Errorf("the digest's id header: %s", ids[9])
	}
	if n := len(e.deliveries(store.DeliveryPending)); n != 0 {
		t.Errorf("%d pending after the digest", n)
	}
	// The next minute's events go one by one again.
	e.advance(time.Minute)
	e.events(2, notify.EventTaskFailed, notify.SeverityWarning)
	e.step()
	e.step()
	if ids, _, _ := rcv.got(); len(ids) != 12 || strings.HasPrefix(ids[11], "digest") {
		t.Errorf("after a minute: %v", ids[10:])
	}
}

// TestFilters: a target gets only the events its filters select.
func TestFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rcv := newReceiver(t, "k", e.clock.Now)
	e.target(notify.TargetSpec{Name: "hook", Kind: notify.KindWebhook, Endpoint: rcv.srv.URL, Secret: "k",
		Filters: notify.Filters{Events: []string{notify.EventNodeOffline, notify.EventTaskFailed}, Clusters: []int64{1}, Severity: notify.SeverityError}})
	e.events(1, notify.EventTaskFailed, notify.SeverityWarning) // below the severity
	e.events(1, notify.EventNodeOffline, notify.SeverityError)  // sent
	e.events(1, notify.EventAuthLockout, notify.SeverityCritical)
	if err := e.st.EnqueueNotifications(t.Context(), []store.NotifyEvent{{Kind: notify.EventNodeOffline,
		Severity: notify.SeverityError, ClusterID: 2, Subject: "other cluster"}}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		e.step()
	}
	_, bodies, _ := rcv.got()
	if len(bodies) != 1 || decode(t, bodies[0])["kind"] != notify.EventNodeOffline {
		t.Fatalf("bodies: %q", bodies)
	}
}

// TestDenyList (docs/security.md item 44): an address in --notify-deny-cidr is never dialed: the
// delivery is dead with the reason, and the receiver gets nothing.
func TestDenyList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, append([]string{"127.0.0.0/8"}, notify.DefaultDenyCIDRs...))
	rcv := newReceiver(t, "k", e.clock.Now)
	e.target(notify.TargetSpec{Name: "hook", Kind: notify.KindWebhook, Endpoint: rcv.srv.URL, Secret: "k"})
	e.target(notify.TargetSpec{Name: "metadata", Kind: notify.KindWebhook, Endpoint: "http://169.254.169.254/latest/meta-data/", Secret: "k"})
	e.events(1, notify.EventNodeOffline, notify.SeverityError)
	e.step()
	if ids, _, _ := rcv.got(); len(ids) != 0 {
		t.Fatalf("a denied receiver got %v", ids)
	}
	dead := e.deliveries(store.DeliveryDead)
	if len(dead) != 2 {
		t.Fatalf("dead letters: %+v", dead)
	}
	for _, d := range dead {
		if !strings.Contains(d.LastError, "--notify-deny-cidr") {
			t.Errorf("delivery %d: %s", d.ID, d.LastError)
		}
	}
}
