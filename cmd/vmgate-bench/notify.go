package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// The notifications' goals (issue 24): a burst of 1 000 events in one second.
// Measured in this process on vmgate's own store (SQLite in the bench's
// temporary directory) and sender, against a receiver on loopback: what is
// measured is the store's work and the sender's, not HTTP to vmgate.

const notifyBurst = 1000

// notifyGoals are the notify measurement's goals.
func notifyGoals(c config) []*goal {
	return []*goal{
		{id: "notify.store", measurement: "notify", what: fmt.Sprintf("store time of %d failed tasks with their task.failed in the outbox", notifyBurst),
			want: "≤ 1.05 × without the events"},
		{id: "notify.p50", measurement: "notify", what: fmt.Sprintf("%d events in one second to a webhook on loopback, event to receiver, p50", notifyBurst),
			want: "≤ 1 s"},
		{id: "notify.digest", measurement: "notify", what: fmt.Sprintf("%d events to a target limited to 10 a minute: messages", notifyBurst),
			want: "≤ 10, the last a digest naming the count"},
	}
}

// notifyStore opens a fresh SQLite store in the bench's directory.
func (b *bench) notifyStore(ctx context.Context, name string) (store.Store, error) {
	dir := filepath.Join(b.tmp, "notify-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return store.Open(ctx, "sqlite://"+filepath.Join(dir, "vmgate.db"))
}

// measureNotify measures the three goals in turn.
func (b *bench) measureNotify(ctx context.Context) error {
	b.printf("vmgate's store on SQLite (a file in the bench's directory) and its sender in this process;\n" +
		"a webhook receiver on loopback that verifies nothing and answers 204\n")
	if err := b.notifyStoreTime(ctx); err != nil {
		return err
	}
	if err := b.notifyLatency(ctx); err != nil {
		return err
	}
	return b.notifyDigest(ctx)
}

// notifyStoreTime: -rounds interleaved pairs of 1 000 failed tasks, without and
// with the event their end causes in the outbox. A task's store time is what
// vmgate writes for it: its row before PVE is asked, its UPID, its end, and the
// audit records of the request and of the end. The end's own write is timed
// apart too (it carries the event: one transaction instead of one statement).
func (b *bench) notifyStoreTime(ctx context.Context) error {
	st, err := b.notifyStore(ctx, "store")
	if err != nil {
		return err
	}
	defer st.Close()
	burst := func(withEvents bool) (whole, ends time.Duration, err error) {
		for i := range notifyBurst {
			vmid := int64(100 + i)
			start := time.Now()
			t, err := st.CreateTask(ctx, store.Task{ClusterID: 1, UserID: 1, UserEmail: "ops@example.org", Op: "migrate",
				Node: "pve1", VMID: vmid})
			if err != nil {
				return 0, 0, err
			}
			upid := fmt.Sprintf("UPID:pve1:%08X:0001C3D4:6650A0B0:qmigrate:%d:vmgate@pve!t:", t.ID, vmid)
			if t, _, err = st.ClaimTaskUPID(ctx, t.ID, store.TaskClaim{UPID: upid, Node: "pve1", StartedAt: time.Now(),
				Source: store.UPIDAnswered}); err != nil {
				return 0, 0, err
			}
			if _, err := st.AppendAudit(ctx, store.AuditRecord{UserID: 1, UserEmail: "ops@example.org", Action: "vm.migrate",
				ClusterID: 1, Node: "pve1", VMID: vmid, Result: "ok", UPID: upid}); err != nil {
				return 0, 0, err
			}
			t.Status, t.ExitStatus, t.Error, t.EndedAt = store.TaskStopped, "migration aborted", "storage 'ceph' is not available", time.Now()
			wctx := ctx
			if withEvents {
				wctx = store.WithOutbox(ctx, notify.TaskFailed(t, time.Now()))
			}
			endStart := time.Now()
			if _, err := st.UpdateTask(wctx, t); err != nil {
				return 0, 0, err
			}
			ends += time.Since(endStart)
			if _, err := st.AppendAudit(ctx, store.AuditRecord{UserID: 1, UserEmail: "ops@example.org", Action: "task.finished",
				ClusterID: 1, Node: "pve1", VMID: vmid, Result: "failed", UPID: upid}); err != nil {
				return 0, 0, err
			}
			whole += time.Since(start)
		}
		return whole, ends, nil
	}
	var ratios, endRatios []float64
	for r := range b.cfg.rounds {
		var plain, with, plainEnds, withEnds time.Duration
		for _, withEvents := range []bool{r%2 == 1, r%2 == 0} { // alternate which goes first
			whole, ends, err := burst(withEvents)
			if err != nil {
				return err
			}
			if withEvents {
				with, withEnds = whole, ends
			} else {
				plain, plainEnds = whole, ends
			}
		}
		ratios = append(ratios, float64(with)/float64(plain))
		endRatios = append(endRatios, float64(withEnds)/float64(plainEnds))
		b.printf("  round %d  %d failed tasks: %s of store time without events, %s with (×%.3f); their ends alone %s, %s (×%.3f)\n",
			r+1, notifyBurst, ms(plain), ms(with), ratios[r], ms(plainEnds), ms(withEnds), endRatios[r])
	}
	m := median(ratios)
	b.judge("notify.store", m <= 1.05, fmt.Sprintf("×%.3f", m), fmt.Sprintf("per round ×%s; the end's write alone ×%s",
		ratioList(ratios), ratioList(endRatios)))
	return nil
}

func ratioList(xs []float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strings.Join(out, ", ×")
}

// benchReceiver is the receiver: it records, per message, when it came and the
// events it carried (their times).
type benchReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	messages int
	latency  []time.Duration
	last     map[string]any
}

func newBenchReceiver() *benchReceiver {
	r := &benchReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(req.Body)
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.messages++
		r.last = m
		if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["time"])); err == nil {
			r.latency = append(r.latency, now.Sub(at))
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	return r
}

func (r *benchReceiver) state() (int, []time.Duration, map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.messages, append([]time.Duration(nil), r.latency...), r.last
}

// notifyTarget makes a webhook target to rcv on st.
func notifyTarget(ctx context.Context, st store.Store, sealer *seal.Sealer, url string, rate int) error {
	svc := notify.NewService(st, sealer, noAudit{}, nil, nil)
	_, err := svc.Create(ctx, benchAdmin, notify.TargetSpec{Name: "bench", Kind: notify.KindWebhook, Endpoint: url,
		Secret: "bench-key", RatePerMinute: rate})
	return err
}

// notifyLatency: 1 000 events written one a millisecond, the sender running as
// the server runs it (a look every 250 ms), one target with no limit.
func (b *bench) notifyLatency(ctx context.Context) error {
	var p50s []float64
	for r := range b.cfg.rounds {
		st, err := b.notifyStore(ctx, "latency-"+strconv.Itoa(r))
		if err != nil {
			return err
		}
		sealer, err := benchSealer()
		if err != nil {
			st.Close()
			return err
		}
		rcv := newBenchReceiver()
		if err := notifyTarget(ctx, st, sealer, rcv.srv.URL, 0); err != nil {
			rcv.srv.Close()
			st.Close()
			return err
		}
		sender := notify.NewSender(notify.SenderConfig{Store: st, Sealer: sealer, Owner: "bench"})
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); sender.Run(sctx) }()
		start := time.Now()
		for i := range notifyBurst {
			ev := store.NotifyEvent{Kind: notify.EventTaskFailed, Severity: notify.SeverityWarning, ClusterID: 1,
				Subject: "migrate of VM " + strconv.Itoa(100+i) + " failed", Link: "/tasks/1", At: time.Now()}
			if err := st.EnqueueNotifications(ctx, []store.NotifyEvent{ev}); err != nil {
				stop()
				return err
			}
			if wait := time.Until(start.Add(time.Duration(i+1) * time.Millisecond)); wait > 0 {
				time.Sleep(wait)
			}
		}
		written := time.Since(start)
		deadline := time.Now().Add(2 * time.Minute)
		var n int
		var lat []time.Duration
		for {
			n, lat, _ = rcv.state()
			if n >= notifyBurst || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond) // the bench polls a count; no test asserts on it
		}
		drained := time.Since(start)
		stop()
		<-done
		rcv.srv.Close()
		st.Close()
		if n < notifyBurst {
			return fmt.Errorf("round %d: %d of %d events arrived in 2 minutes", r+1, n, notifyBurst)
		}
		p50 := percentile(lat, 50)
		p50s = append(p50s, float64(p50))
		b.printf("  round %d  %d events written in %s, all at the receiver after %s: p50 %s, p99 %s\n", r+1, notifyBurst,
			ms(written), ms(drained), ms(p50), ms(percentile(lat, 99)))
	}
	m := median(p50s)
	b.judge("notify.p50", m <= float64(time.Second), msf(m), fmt.Sprintf("per round %s ms", strings.Join(msList(p50s), ", ")))
	return nil
}

// notifyDigest: the burst written at once to a target limited to 10 messages
// a minute; the sender's rounds run until nothing is pending.
func (b *bench) notifyDigest(ctx context.Context) error {
	st, err := b.notifyStore(ctx, "digest")
	if err != nil {
		return err
	}
	defer st.Close()
	sealer, err := benchSealer()
	if err != nil {
		return err
	}
	rcv := newBenchReceiver()
	defer rcv.srv.Close()
	if err := notifyTarget(ctx, st, sealer, rcv.srv.URL, 10); err != nil {
		return err
	}
	evs := make([]store.NotifyEvent, notifyBurst)
	for i := range evs {
		evs[i] = store.NotifyEvent{Kind: notify.EventNodeOffline, Severity: notify.SeverityError, ClusterID: 1,
			Subject: "event " + strconv.Itoa(i), At: time.Now()}
	}
	if err := st.EnqueueNotifications(ctx, evs); err != nil {
		return err
	}
	sender := notify.NewSender(notify.SenderConfig{Store: st, Sealer: sealer, Owner: "bench"})
	for range 50 {
		if _, err := sender.Step(ctx); err != nil {
			return err
		}
		pending, err := st.NotifyDeliveries(ctx, store.NotifyDeliveryFilter{State: store.DeliveryPending, Limit: 1})
		if err != nil {
			return err
		}
		if len(pending) == 0 {
			break
		}
	}
	n, _, last := rcv.state()
	count, _ := last["count"].(float64)
	ok := n <= 10 && last["kind"] == "digest" && int(count) == notifyBurst-(n-1)
	b.printf("  %d messages; the last: kind %v, count %v\n", n, last["kind"], last["count"])
	b.judge("notify.digest", ok, fmt.Sprintf("%d messages, the last a digest of %v", n, last["count"]),
		fmt.Sprintf("%d single messages, then one digest", n-1))
	return nil
}

type noAudit struct{}

func (noAudit) Record(context.Context, store.AuditRecord) {}

func benchSealer() (*seal.Sealer, error) {
	key := make([]byte, seal.KeySize)
	for i := range key {
		key[i] = byte(i + 1)
	}
	return seal.New(key)
}

// benchAdmin is the targets' admin in the bench.
var benchAdmin = fleet.Actor{UserID: 1, Email: "bench@example.org", Role: store.RoleAdmin}
