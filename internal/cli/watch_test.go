package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/testkit"
)

func ptr[T any](v T) *T { return &v }

// syncBuffer is a bytes buffer safe to read while Watch writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func taskEvent(percent float64, status string) string {
	t := map[string]any{"taskId": "UPID:x", "type": "qmigrate", "vmid": 100, "target": "pve2", "status": status,
		"result": map[string]string{"running": "running", "stopped": "ok"}[status],
		"progress": map[string]any{"percent": percent, "transferredBytes": int64(percent * 1e6), "totalBytes": int64(100e6),
			"bytesPerSecond": 1e6, "phase": "memory"}}
	b, _ := json.Marshal(t)
	return "event: task\ndata: " + string(b) + "\n\n"
}

// TestWatchReconnectsAfterAShutdown: a stream that vmgate ends with `event:
// shutdown` is opened again after its retry, with a notice, and the drawing goes
// on to the task's end.
func TestWatchReconnectsAfterAShutdown(t *testing.T) {
	var conns atomic.Int32
	srv := newSSEServer(t, func(w http.ResponseWriter, n int32) {
		switch n {
		case 1:
			fmt.Fprint(w, taskEvent(10, "running"))
			fmt.Fprint(w, "event: shutdown\nretry: 20\ndata: {\"reason\":\"shutdown\",\"retryMs\":20}\n\n")
		default:
			fmt.Fprint(w, ": ping\n\n")
			fmt.Fprint(w, taskEvent(60, "running"))
			fmt.Fprint(w, taskEvent(100, "stopped"))
			fmt.Fprint(w, "event: end\ndata: {}\n\n")
		}
	}, &conns)
	var out syncBuffer
	c := client.New(srv, client.WithToken("tok"))
	task, err := Watch(context.Background(), c, "UPID:x", WatchOptions{Progress: &out})
	if err != nil || task.Status != "stopped" || conns.Load() != 2 {
		t.Fatalf("watch: %+v %v after %d connections", task, err, conns.Load())
	}
	got := out.String()
	for _, want := range []string{"10%", NoticeRestarted, NoticeReconnected, " 60%", "100%"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lacks %q:\n%s", want, got)
		}
	}
}

// TestWatchReconnectsWhileNothingListens: a stream that breaks off, and a server
// that refuses connections for a while, are retried with backoff without a raw
// error, until the server is back.
func TestWatchReconnectsWhileNothingListens(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, taskEvent(30, "running"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection breaks off: no end
	})}
	go first.Serve(ln)

	var out syncBuffer
	done := make(chan error, 1)
	var task client.Task
	go func() {
		var err error
		task, err = Watch(context.Background(), client.New("http://"+addr, client.WithToken("tok")), "UPID:x",
			WatchOptions{Progress: &out, MaxBackoff: 20 * time.Millisecond})
		done <- err
	}()
	waitFor(t, &out, NoticeUnreachable)
	first.Close()
	// Refused for a while: the watcher keeps trying (its backoff is short), quietly.
	var conns atomic.Int32
	var ln2 net.Listener
	testkit.Eventually(t, "listening on "+addr+" again", func() (err error) {
		ln2, err = net.Listen("tcp", addr)
		return err
	})
	second := &http.Server{Handler: sseHandler(func(w http.ResponseWriter, n int32) {
		fmt.Fprint(w, taskEvent(100, "stopped"))
		fmt.Fprint(w, "event: end\ndata: {}\n\n")
	}, &conns)}
	go second.Serve(ln2)
	t.Cleanup(func() { second.Close() })
	if err := <-done; err != nil || task.Status != "stopped" {
		t.Fatalf("watch: %+v %v", task, err)
	}
	if got := out.String(); strings.Contains(got, "dial tcp") || strings.Contains(got, "refused") ||
		!strings.Contains(got, NoticeReconnected) {
		t.Fatalf("progress:\n%s", got)
	}
}

// TestWatchStopsOnARefusal: 404 and 401 are answers, not outages.
func TestWatchStopsOnARefusal(t *testing.T) {
	var conns atomic.Int32
	srv := newSSEServer(t, nil, &conns)
	_, err := Watch(context.Background(), client.New(srv, client.WithToken("tok")), "UPID:missing", WatchOptions{})
	if Explain(err, "").Code != ExitNotFound || conns.Load() != 1 {
		t.Fatalf("watch of a missing task: %v after %d connections", err, conns.Load())
	}
}

// TestSummary: a migration's last line names the target, the duration and
// PVE's own average rate, read from its log (issue 19 item 7: not one computed
// from the bytes and the task's times).
func TestSummary(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	end := start.Add(20 * time.Second)
	log := []client.TaskLogLine{{N: 1, T: "2026-11-22 10:00:19 migration completed, transferred 4.0 GiB VM-state"},
		{N: 2, T: "2026-11-22 10:00:19 average migration speed: 292.6 MiB/s - downtime 61 ms"},
		{N: 3, T: "2026-11-22 10:00:20 migration finished successfully (duration 00:00:20)"}}
	if got := PVERate(log); got != "292.6 MiB/s" {
		t.Errorf("PVE's rate: %q", got)
	}
	got := Summary(client.Task{Type: "qmigrate", Op: ptr("migrate"), IsMigration: true, GuestKind: ptr(client.QEMU), VMID: ptr[int64](100),
		Target: ptr("pve2"), Result: "ok", ExitStatus: ptr("OK"), StartTime: start, EndTime: &end,
		Progress: &client.Progress{TransferredBytes: 4 << 30, TotalBytes: 4 << 30, Percent: 100}}, PVERate(log))
	if got != "VM 100 migrated to pve2 in 20.0s (avg 292.6 MiB/s)" {
		t.Errorf("migration: %q", got)
	}
	got = Summary(client.Task{Type: "qmigrate", Op: ptr("migrate"), IsMigration: true, VMID: ptr[int64](100), Target: ptr("pve2"),
		Result: "failed", ExitStatus: ptr("migration aborted"), Error: ptr("target storage full"), StartTime: start, EndTime: &end}, "")
	if got != "VM 100: migration to pve2 failed after 20.0s: target storage full" {
		t.Errorf("failed migration: %q", got)
	}
	// A container's migration reads the same, from op and isMigration, never PVE's
	// type; its log has no average rate.
	got = Summary(client.Task{Type: "vzmigrate", Op: ptr("migrate"), IsMigration: true, GuestKind: ptr(client.LXC), VMID: ptr[int64](200),
		Target: ptr("pve3"), Result: "ok", ExitStatus: ptr("OK"), StartTime: start, EndTime: &end}, "")
	if got != "CT 200 migrated to pve3 in 20.0s" {
		t.Errorf("container migration: %q", got)
	}
	got = Summary(client.Task{Type: "vzstart", Op: ptr("start"), GuestKind: ptr(client.LXC), VMID: ptr[int64](201), Result: "failed",
		Error: ptr("startup for container '201' failed"), StartTime: start, EndTime: &end}, "")
	if got != "CT 201: start failed after 20.0s: startup for container '201' failed" {
		t.Errorf("container start: %q", got)
	}
}

func waitFor(t *testing.T, out *syncBuffer, s string) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%q in the progress", s), func() error {
		if got := out.String(); !strings.Contains(got, s) {
			return fmt.Errorf("progress so far:\n%s", got)
		}
		return nil
	})
}

// sseHandler serves the task's event stream with body (nil: 404), numbering the
// connections.
func sseHandler(body func(http.ResponseWriter, int32), conns *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := conns.Add(1)
		if body == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			fmt.Fprint(w, `{"code":404,"message":"task not found","reason":"not_found"}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		body(w, n)
	}
}

func newSSEServer(t *testing.T, body func(http.ResponseWriter, int32), conns *atomic.Int32) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: sseHandler(body, conns)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestProgressLineOfAContainer: a container's move names the CT and shows no
// byte counts PVE's log does not give; a VM's keeps them.
func TestProgressLineOfAContainer(t *testing.T) {
	var b strings.Builder
	v := newProgressView(&b, false, "UPID:x")
	v.show(client.Task{VMID: ptr[int64](200), GuestKind: ptr(client.LXC), Target: ptr("pve2"), Progress: &client.Progress{Percent: 0, Phase: "starting"}})
	v.show(client.Task{VMID: ptr[int64](100), GuestKind: ptr(client.QEMU), Target: ptr("pve3"), Progress: &client.Progress{Percent: 50, Phase: "memory",
		TransferredBytes: 1 << 30, TotalBytes: 2 << 30, BytesPerSecond: 100 << 20}})
	want := "CT 200 → pve2:   0% starting\nVM 100 → pve3:  50% memory, 1.0 GiB of 2.0 GiB at 100.0 MiB/s\n"
	if b.String() != want {
		t.Errorf("progress lines:\n%q\nwant\n%q", b.String(), want)
	}
}

// TestMigrationBarEndsFull (issue 19 item 7): on a terminal the bar of a
// migration that ended well is drawn last at 100 % and "done", never "[done] 99%";
// before the end it stays below 100 %, whatever the progress says.
func TestMigrationBarEndsFull(t *testing.T) {
	var b strings.Builder
	v := newProgressView(&b, true, "UPID:x")
	task := func(status, result string, percent float64, phase string) client.Task {
		return client.Task{VMID: ptr[int64](100), GuestKind: ptr(client.QEMU), Target: ptr("pve2"), Status: status, Result: result,
			Progress: &client.Progress{Percent: percent, Phase: phase, TotalBytes: 1 << 30, BytesPerSecond: 1 << 20}}
	}
	v.show(task("running", "running", 40, "memory"))
	v.show(task("running", "running", 99.6, "done"))
	if got := b.String(); strings.Contains(got, "[done]") || strings.Contains(got, "100%") {
		t.Fatalf("the bar said done before the task ended: %q", got)
	}
	last := task("stopped", "ok", 100, "done")
	v.show(last)
	v.finish(last)
	got := b.String()
	tail := got[strings.LastIndex(got, "\r")+1:]
	if !strings.Contains(tail, "[done]") || !strings.Contains(tail, "100%") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("the bar's last drawing %q (all: %q)", tail, got)
	}
}

// TestContainerPhasesArePrinted: a container's restart migration stays at 0 %
// until its end (PVE's log gives a volume's size only once it is copied), so its
// plain output prints a line for each phase it enters, not only for each tenth.
func TestContainerPhasesArePrinted(t *testing.T) {
	var b strings.Builder
	v := newProgressView(&b, false, "UPID:x")
	for _, phase := range []string{"starting", "shutdown", "shutdown", "storage", "start"} {
		v.show(client.Task{VMID: ptr[int64](202), GuestKind: ptr(client.LXC), Target: ptr("pve1"), Status: "running", Result: "running",
			Progress: &client.Progress{Percent: 0, Phase: phase}})
	}
	want := "CT 202 → pve1:   0% starting\nCT 202 → pve1:   0% shutdown\nCT 202 → pve1:   0% storage\nCT 202 → pve1:   0% start\n"
	if b.String() != want {
		t.Errorf("progress lines:\n%q\nwant\n%q", b.String(), want)
	}
}
