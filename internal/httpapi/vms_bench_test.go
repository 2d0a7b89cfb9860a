package httpapi

import (
	"encoding/json"
	"io"
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
