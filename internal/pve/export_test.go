package pve

import (
	"net/http"
	"time"
)

// WithIdleTimeout returns cfg with the keep-alive pool closing a connection only
// after d unused. The net/http pool hands out the connection used last, so when
// fewer requests are in flight than the pool holds, the connections at its
// bottom stay unused; on a busy machine a test's round can last longer than the
// 4 s default, and the pool then closes them and dials again, as it should. The
// tests that count new connections are about reuse, not about that timeout.
func WithIdleTimeout(cfg Config, d time.Duration) Config {
	cfg.idleTimeout = d
	return cfg
}

// WithTransportWrapper returns cfg with wrap standing between the client and
// its transport.
func WithTransportWrapper(cfg Config, wrap func(http.RoundTripper) http.RoundTripper) Config {
	cfg.wrapTransport = func(rt roundTripper) roundTripper {
		return wrappedTransport{wrap(rt), rt}
	}
	return cfg
}

type wrappedTransport struct {
	http.RoundTripper
	idle interface{ CloseIdleConnections() }
}

func (w wrappedTransport) CloseIdleConnections() { w.idle.CloseIdleConnections() }
