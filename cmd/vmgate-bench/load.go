package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmgate/vmgate/internal/pvesim"
)

// maxRequestsPerLoop bounds every load loop in count, whatever its duration says.
const maxRequestsPerLoop = 2_000_000

// requestTimeout bounds every request the bench makes.
const requestTimeout = 30 * time.Second

// errThrottled is a 429: counted apart from failures (a login flood is meant to get them).
var errThrottled = errors.New("429 Too Many Requests")

// request makes the seq-th request of a loop and says how it went: nil for the
// expected status, errThrottled for a 429, another error otherwise.
type request func(ctx context.Context, seq int64) error

// target is one HTTP request the bench repeats.
type target struct {
	client *http.Client
	method string
	url    string
	header http.Header
	body   string
	want   int // expected status (default 200)
}

// do sends the request, reads the body to its end and checks the status.
func (t target) do(ctx context.Context, _ int64) error {
	_, err := t.fetch(ctx)
	return err
}

// fetch is do that keeps the body, for the few requests that need it.
func (t target) fetch(ctx context.Context) ([]byte, error) {
	var body io.Reader
	if t.body != "" {
		body = strings.NewReader(t.body)
	}
	req, err := http.NewRequestWithContext(ctx, t.method, t.url, body)
	if err != nil {
		return nil, err
	}
	for k, v := range t.header {
		req.Header[k] = v
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	want := t.want
	if want == 0 {
		want = http.StatusOK
	}
	switch resp.StatusCode {
	case want:
		return buf.Bytes(), nil
	case http.StatusTooManyRequests:
		return buf.Bytes(), errThrottled
	}
	return buf.Bytes(), fmt.Errorf("%s %s: %s: %.200s", t.method, t.url, resp.Status, buf.String())
}

// loadResult is what one load loop measured.
type loadResult struct {
	ok, throttled, failed int64
	firstErr              error
	elapsed               time.Duration
	lat                   []time.Duration // of the requests that got the expected answer
	lagP99                time.Duration   // open loop: how late the bench sent its requests
}

func (r loadResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

func (r loadResult) total() int64 { return r.ok + r.throttled + r.failed }

// errSummary is "" or ", 3 errors (first: ...)".
func (r loadResult) errSummary() string {
	if r.failed == 0 {
		return ""
	}
	return fmt.Sprintf(", %d errors (first: %v)", r.failed, r.firstErr)
}

// recorder collects the outcomes of one loop from many goroutines.
type recorder struct {
	mu  sync.Mutex
	res loadResult
}

func (rc *recorder) add(err error, lat time.Duration) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case err == nil:
		rc.res.ok++
		rc.res.lat = append(rc.res.lat, lat)
	case errors.Is(err, errThrottled):
		rc.res.throttled++
	default:
		rc.res.failed++
		if rc.res.firstErr == nil {
			rc.res.firstErr = err
		}
	}
}

// closedLoop runs clients that each send their next request when the last one is
// answered, until dur has passed (requests under way then are waited for) or
// maxRequestsPerLoop requests were sent. It measures throughput.
func closedLoop(ctx context.Context, clients int, dur time.Duration, do request) loadResult {
	var rc recorder
	var seq atomic.Int64
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				n := seq.Add(1)
				if n > maxRequestsPerLoop {
					return
				}
				t0 := time.Now()
				err := do(ctx, n)
				rc.add(err, time.Since(t0))
			}
		}()
	}
	wg.Wait()
	rc.res.elapsed = time.Since(start)
	return rc.res
}

// openLoop sends requests at a fixed rate for dur, each on its own goroutine, whether
// or not the earlier ones were answered: a slow answer cannot hold back the next
// request, so latency is not hidden by coordinated omission. A request's latency
// counts from when it was sent; Go's timers are only good to about a millisecond, so
// requests leave in small bursts and lagP99 says how late they left. Should
// maxInFlight requests be under way at once (a stalled server), the next waits and
// its latency counts from when it was due.
func openLoop(ctx context.Context, rate float64, dur time.Duration, maxInFlight int, do request) loadResult {
	var rc recorder
	n := min(int64(rate*dur.Seconds()), maxRequestsPerLoop)
	interval := time.Duration(float64(time.Second) / rate)
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	lags := make([]time.Duration, 0, n)
	start := time.Now()
	for i := int64(0); i < n && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		from := time.Now()
		select {
		case sem <- struct{}{}:
		default:
			from = due
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				continue
			}
		}
		lags = append(lags, time.Since(due))
		wg.Add(1)
		go func(seq int64, from time.Time) {
			defer wg.Done()
			err := do(ctx, seq)
			rc.add(err, time.Since(from))
			<-sem
		}(i, from)
	}
	wg.Wait()
	rc.res.elapsed = time.Since(start)
	rc.res.lagP99 = percentile(lags, 99)
	return rc.res
}

// percentile is the nearest-rank p-th percentile (0 for no samples).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(rank, len(s)-1))]
}

// median of figures (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// newClient is an HTTP/1.1 client with a keep-alive pool big enough that the bench
// never closes a connection it could use again (its own churn would be measured).
// Compression is off: the bench compares vmgate, the bare proxy and the emulator on
// the same plain bytes.
func newClient(tlsConf *tls.Config, dial func(ctx context.Context, network, addr string) (net.Conn, error), keepAlive bool) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:     tlsConf,
		DisableCompression:  true,
		DisableKeepAlives:   !keepAlive,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     2 * time.Minute,
		ForceAttemptHTTP2:   false,
	}
	if dial != nil {
		tr.DialContext = dial
	}
	return &http.Client{Transport: tr, Timeout: requestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// pinnedTLS trusts exactly the certificate with this SHA-256 fingerprint
// ("AB:CD:..."), as vmgate does with a PVE node.
func pinnedTLS(fingerprint string) *tls.Config {
	want := strings.ToUpper(fingerprint)
	return &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no certificate")
			}
			if got := pvesim.Fingerprint(cs.PeerCertificates[0].Raw); got != want {
				return fmt.Errorf("certificate %s is not the pinned %s", got, want)
			}
			return nil
		},
	}
}

// sourceAddrs hands out loopback source addresses 127.<octet>.x.y, a new one each
// call. Linux routes all of 127.0.0.0/8 to lo, so a client can appear to vmgate as
// many different addresses without vmgate having to trust a proxy header.
type sourceAddrs struct {
	octet byte
	next  atomic.Uint32
}

func (s *sourceAddrs) get() net.IP {
	n := s.next.Add(1) % (254 * 254)
	return net.IPv4(127, s.octet, byte(n/254), byte(1+n%254))
}

// dialFrom dials from the address ip() gives each new connection.
func dialFrom(ip func() net.IP) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip()}, Timeout: 10 * time.Second}
		return d.DialContext(ctx, network, addr)
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
