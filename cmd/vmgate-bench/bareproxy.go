package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// roleEnv makes the bench binary (or its test binary) act as the bare proxy when it
// re-executes itself: the reference runs in its own process, so that its CPU time is
// read from /proc like vmgate's and the two are compared fairly.
const roleEnv = "VMGATE_BENCH_ROLE"

// Environment of the bare proxy role.
const (
	bareTargetEnv      = "VMGATE_BENCH_TARGET"
	bareFingerprintEnv = "VMGATE_BENCH_FINGERPRINT"
	bareTokenEnv       = "VMGATE_BENCH_TOKEN"
)

// bareProxyMain is the reference vmgate is measured against: an
// httputil.ReverseProxy in front of the emulator that adds the PVE API token header
// and does nothing else (no authentication, no authorization, no logging), with a
// keep-alive pool that never closes a connection it could reuse. Its first stdout
// line is its URL; it serves until SIGTERM or SIGINT.
func bareProxyMain() int {
	target, err := url.Parse(os.Getenv(bareTargetEnv))
	if err != nil || target.Host == "" {
		fmt.Fprintln(os.Stderr, "bare proxy: bad", bareTargetEnv)
		return 2
	}
	auth := "PVEAPIToken=" + os.Getenv(bareTokenEnv)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Set("Authorization", auth)
		},
		Transport: &http.Transport{
			TLSClientConfig:     pinnedTLS(os.Getenv(bareFingerprintEnv)),
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     2 * time.Minute,
			ForceAttemptHTTP2:   false,
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bare proxy:", err)
		return 1
	}
	fmt.Printf("http://%s\n", ln.Addr())
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	srv.Close()
	return 0
}
