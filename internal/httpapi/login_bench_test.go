package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/auth"
)

// BenchmarkLoginFlood measures issue 8 (docs/history.md)'s login goals over real HTTP with the
// production argon2id parameters and the default hashing slots (GOMAXPROCS-1):
//
//   - logins: b.N successful logins from 4×slots+4 concurrent clients. It reports
//     logins/s, the bound slots/t_hash (t_hash: one hash alone, the median of 9
//     timed just before),
//     their ratio (goal ≥ 0.8) and how many attempts were answered 429 (goal: none,
//     they wait their turn; one that is not comes back at once).
//   - get-quiet and get-flood: b.N authenticated GETs (/api/v1/user/me), one at a
//     time, without and during a wrong-password flood from 50 addresses (50
//     clients behind a trusted proxy, a fresh e-mail each attempt so that no
//     backoff spares the hasher, no per-address limit; auth's default RefusalPause
//     holds each 429 for 1 s). They report the GETs' p50 and p99 (goal during the
//     flood: p99 ≤ 50 ms) and the flood's answers per second.
//
// Speed is measured here and nowhere else: no test asserts it.
//
//	go test -run '^$' -bench LoginFlood -benchtime 300x -count 3 ./internal/httpapi/
func BenchmarkLoginFlood(b *testing.B) {
	e := newTestEnvWith(b, auth.Config{Argon2: auth.DefaultParams(), PerAddressRate: rate.Inf, PerAddressBurst: 1})
	e.addUser("reader", accounts.RoleUser)
	cfg := e.apiConfig()
	cfg.TrustedProxies = []string{"127.0.0.1"}
	api, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	slots := float64(max(1, runtime.GOMAXPROCS(0)-1)) // auth's default

	b.Run("logins", func(b *testing.B) {
		tHash := medianHashTime(b, 9) // each run: the machine's load changes
		hc := benchClient(64)
		var next, limited atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for range 4*int(slots) + 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					for { // a turned-away login comes back at once until it gets through
						code := benchLogin(b, hc, srv.URL, "reader@example.org", envPassword, "")
						if code == http.StatusOK {
							break
						}
						if code != http.StatusTooManyRequests {
							b.Errorf("login: %d", code)
							return
						}
						limited.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		rate := float64(b.N) / b.Elapsed().Seconds()
		bound := slots / tHash.Seconds()
		b.ReportMetric(rate, "logins/s")
		b.ReportMetric(bound, "slots/t_hash")
		b.ReportMetric(rate/bound, "ratio")
		b.ReportMetric(float64(limited.Load()), "answered-429")
		b.ReportMetric(float64(tHash.Microseconds())/1000, "t_hash-ms")
	})
	for _, flood := range []bool{false, true} {
		name := map[bool]string{false: "get-quiet", true: "get-flood"}[flood]
		b.Run(name, func(b *testing.B) {
			var refused, limited atomic.Int64
			stop := func() {}
			if flood {
				stop = startLoginFlood(b, srv.URL, 50, &refused, &limited)
			}
			hc := benchClient(1)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				req, _ := http.NewRequest("GET", srv.URL+"/api/v1/user/me", nil)
				req.Header.Set("Authorization", "Bearer "+e.tokens["reader"])
				start := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(start))
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("authenticated GET: %d", resp.StatusCode)
				}
			}
			elapsed := b.Elapsed()
			refusedN, limitedN := refused.Load(), limited.Load() // before the flood drains
			stop()
			slices.Sort(lat)
			ms := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(ms(0.50), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
			if flood {
				b.ReportMetric(float64(refusedN)/elapsed.Seconds(), "flood-401/s")
				b.ReportMetric(float64(limitedN)/elapsed.Seconds(), "flood-429/s")
			}
		})
	}
}

// startLoginFlood starts one client per address, each logging in with a fresh
// e-mail and a wrong password as fast as it is answered, and counts the answers
// 401 (hashed) and 429 (turned away); stop ends them and waits.
func startLoginFlood(b *testing.B, base string, addresses int, refused, limited *atomic.Int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	hc := benchClient(addresses)
	for i := range addresses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			xff := fmt.Sprintf("198.51.100.%d", i+1)
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				code := benchLogin(b, hc, base, fmt.Sprintf("flood-%d-%d@example.org", i, n), "not the password!", xff)
				switch code {
				case http.StatusUnauthorized:
					refused.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
				default:
					b.Errorf("flood login: %d", code)
					return
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// benchLogin posts one login, from xff behind the trusted proxy when it is set,
// and returns the status (0 when the request failed).
func benchLogin(b *testing.B, hc *http.Client, base, email, password, xff string) int {
	req, _ := http.NewRequest("POST", base+"/api/v1/user/login",
		strings.NewReader(fmt.Sprintf(`{"email":%q,"password":%q}`, email, password)))
	req.Header.Set("Content-Type", "application/json")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func benchClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}}
}

// medianHashTime is the median time of one production argon2id hash, run alone.
func medianHashTime(b *testing.B, n int) time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		start := time.Now()
		if _, err := auth.HashPassword("a password to time", auth.DefaultParams()); err != nil {
			b.Fatal(err)
		}
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d[n/2]
}
