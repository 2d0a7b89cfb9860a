package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/vmgate/vmgate/internal/servertls"
)

// transport decides how the server speaks (docs/security.md item 27). With --tls-cert and
// --tls-key it loads the pair and keeps it fresh — on SIGHUP and when the files
// change — until ctx ends. Without them it returns nil: plain HTTP, which outside
// dev mode is refused on an address that is not loopback unless --plain-http says
// a TLS-terminating proxy is in front. It runs before anything else starts, so a
// misconfiguration ends the process at once with a message naming the flags.
//
// SIGHUP (systemd's reload, packaging/vmgate.service) never ends the process: it
// is taken from here on, before the listener is announced, and reloads the
// certificate, or with plain HTTP is only logged.
func (c *serverCmd) transport(ctx context.Context, log *slog.Logger) (*servertls.Certificate, error) {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, fmt.Errorf("--tls-cert and --tls-key go together: give both files or neither")
	}
	var cert *servertls.Certificate
	if c.TLSCert == "" {
		if err := c.checkPlainHTTP(log); err != nil {
			return nil, err
		}
	} else {
		if c.PlainHTTP {
			return nil, fmt.Errorf("--plain-http contradicts --tls-cert/--tls-key: serve either HTTPS or plain HTTP")
		}
		var err error
		if cert, err = servertls.Load(c.TLSCert, c.TLSKey, log); err != nil {
			return nil, err
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		if cert != nil {
			cert.Watch(ctx, servertls.DefaultPollInterval, hup)
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: nothing to reload (no --tls-cert)")
			}
		}
	}()
	return cert, nil
}

// checkPlainHTTP refuses plain HTTP on an address that is not loopback, outside
// dev mode and without --plain-http; with either it warns.
func (c *serverCmd) checkPlainHTTP(log *slog.Logger) error {
	if loopbackOnly(c.Listen) {
		return nil
	}
	switch {
	case c.PlainHTTP:
		log.Warn("serving plain HTTP on an address that is not loopback (--plain-http): only a TLS-terminating proxy in front keeps passwords and tokens off the network in clear",
			"listen", c.Listen)
		return nil
	case c.Dev:
		log.Warn("dev mode serves plain HTTP on an address that is not loopback", "listen", c.Listen)
		return nil
	}
	return fmt.Errorf("refusing to serve plain HTTP on %s, which is not a loopback address: passwords and tokens would cross the network in clear; "+
		"serve HTTPS with --tls-cert FILE --tls-key FILE, or give --plain-http when a TLS-terminating proxy is in front", c.Listen)
}

// loopbackOnly reports whether every address addr (host:port) may listen on is a
// loopback one. An empty host is every interface; a name counts only when all
// its addresses are loopback.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// serve serves hs on ln until it is shut down: HTTPS with cert (HTTP/2 and
// HTTP/1.1) or, when cert is nil, plain HTTP.
func serve(hs *http.Server, ln net.Listener, cert *servertls.Certificate) error {
	if cert == nil {
		return hs.Serve(ln)
	}
	hs.TLSConfig = servertls.Config(cert)
	return hs.ServeTLS(ln, "", "")
}

// scheme is the URL scheme the server answers on.
func scheme(cert *servertls.Certificate) string {
	if cert == nil {
		return "http"
	}
	return "https"
}
