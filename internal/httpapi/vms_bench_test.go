package httpapi

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/vmops"
)

// BenchmarkTaskPoll200: 200 clients poll one running migration over HTTP as fast
// as they can, through the whole stack (auth, grant check, store, coalesced PVE
// reads). One iteration is one poll. It reports PVE's task-status and task-log
// reads per second (the coalescing: about one each per poll interval, whatever the
// number of clients) and the polls' p50/p99 latency.
//
//	go test -run '^$' -bench Poll -benchtime 60000x ./internal/httpapi/
func BenchmarkTaskPoll200(b *testing.B) {
	for _, interval := range []time.Duration{vmops.DefaultPollInterval, 250 * time.Millisecond} {
		b.Run("interval="+interval.String(), func(b *testing.B) { benchPoll(b, 200, interval) })
	}
}

func benchPoll(b *testing.B, clients int, interval time.Duration) {
	e := newVMEnv(b, 0.2) // a 4 GiB migration takes minutes: it runs through the benchmark
	e.start(func(c *vmops.Config) { c.PollInterval = interval })
	srv := httptest.NewServer(e.api)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	a := e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve2"}`)
	if a.status != 200 {
		b.Fatalf("migrate: %d %s", a.status, a.raw)
	}
	url := srv.URL + taskPath(a.header.Get("X-Task-Id"))
	token := "Bearer " + e.tokens["view"]
	poll := func() (time.Duration, error) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", token)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		var env struct {
			Data struct {
				Status string `json:"status"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&env)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && (resp.StatusCode != 200 || env.Data.Status != "running") {
			b.Errorf("poll answered %d, status %q", resp.StatusCode, env.Data.Status)
		}
		return time.Since(start), err
	}
	if _, err := poll(); err != nil { // warm: connections, caches
		b.Fatal(err)
	}

	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	statusBefore, logBefore := e.dev.Requests("GET", simTaskStatus), e.dev.Requests("GET", simTaskLog)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				d, err := poll()
				if err != nil {
					b.Error(err)
					return
				}
				lat[i] = d
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	statusReads := e.dev.Requests("GET", simTaskStatus) - statusBefore
	logReads := e.dev.Requests("GET", simTaskLog) - logBefore
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(statusReads)/elapsed.Seconds(), "pve-status-reads/s")
	b.ReportMetric(float64(logReads)/elapsed.Seconds(), "pve-log-reads/s")
	b.ReportMetric(float64(statusReads)/(float64(elapsed)/float64(interval)), "pve-status-reads/interval")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "polls/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkReads is the cost of authenticated reads through the whole handler
// (middleware, token, grant, use case, rendering), without the network: a
// finished task (answered from memory, no PVE call), the caller's account, and a
// VM's status (one read of the emulator, in process, over HTTPS), each with its
// log line written as the server writes it (text, here to nowhere). Allocations
// per read are the figure to watch; cmd/vmgate-bench measures the real thing
// (issue 19 item 10, docs/history.md: a finished-task read against net/http
// serving the same answer).
//
//	go test -run '^$' -bench Reads -benchmem ./internal/httpapi/
func BenchmarkReads(b *testing.B) {
	e := newVMEnv(b, 1000)
	a := e.call("op", "POST", e.vmPath("pve1", 101)+"/start", "")
	if a.status != 200 {
		b.Fatalf("start: %d %s", a.status, a.raw)
	}
	task := taskPath(a.header.Get("X-Task-Id"))
	cfg := e.apiConfig()
	cfg.VMs, cfg.Operations = e.svc, e.ops
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	api, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, path string }{
		{"finished-task", task},
		{"me", "/api/v1/user/me"},
		{"vm-status", e.vmPath("pve1", 100)},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", c.path, nil)
			r.RemoteAddr = "192.0.2.7:1234"
			r.Header.Set("Authorization", "Bearer "+e.tokens["view"])
			w := &discardWriter{h: http.Header{}}
			api.ServeHTTP(w, r)
			if w.status != http.StatusOK {
				b.Fatalf("%s: %d", c.path, w.status)
			}
			b.ReportAllocs()
			for b.Loop() {
				w.h = http.Header{} // a new map for each answer, as net/http makes
				w.status = 0
				api.ServeHTTP(w, r)
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps the status only.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
