// Package servertls is the TLS of vmgate's own listener (docs/security.md item 27): a server
// configuration (TLS 1.2 at least, only AEAD cipher suites with forward secrecy,
// HTTP/2 offered by ALPN) and a certificate that follows its files.
//
// The certificate and key are read from two PEM files and served through
// tls.Config.GetCertificate from an atomic pointer, so a reload swaps the pair
// for new handshakes without a restart, while connections already open keep the
// session they negotiated. Reload happens on SIGHUP (Watch's signal channel) and
// when either file changes: Watch polls their modification time, size, device and
// inode every few seconds, which catches an in-place rewrite, a rename over the
// file (certbot, cert-manager) and a symbolic link moved to a new target, needs no
// dependency and costs two stat calls. A new pair that does not load — a key that
// does not match, a half-written file, a renewal that wrote the certificate but not
// yet the key — is logged and the current pair kept; the next change of either file
// is tried again.
package servertls

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPollInterval is how often Watch looks at the files by default.
const DefaultPollInterval = 5 * time.Second

// expiryWarning is how close to its end a loaded certificate is logged as a warning.
const expiryWarning = 14 * 24 * time.Hour

// Config returns the server side TLS configuration of vmgate's listener, serving
// cert's current pair. TLS 1.3 chooses its own (all strong) suites; for TLS 1.2 only
// ECDHE key exchange with AES-GCM or ChaCha20-Poly1305 is offered (Mozilla's
// "intermediate" profile), which includes what HTTP/2 requires (RFC 9113 §9.2.2).
func Config(cert *Certificate) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: cert.GetCertificate,
	}
}

// Certificate is a certificate and key pair read from files, reloaded by Reload
// and Watch. It is safe for concurrent use.
type Certificate struct {
	certFile, keyFile string
	log               *slog.Logger

	current atomic.Pointer[tls.Certificate]

	mu    sync.Mutex // one reload at a time; guards seen
	seen  stamp      // the files as the last reload attempt found them
	loads atomic.Int64
}

// Load reads the pair once; it fails when the files do not hold a matching
// certificate and key. A nil log discards.
func Load(certFile, keyFile string, log *slog.Logger) (*Certificate, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Certificate{certFile: certFile, keyFile: keyFile, log: log}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// GetCertificate serves the current pair (tls.Config.GetCertificate).
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.current.Load(), nil
}

// Leaf returns the current certificate.
func (c *Certificate) Leaf() *x509.Certificate { return c.current.Load().Leaf }

// Loads counts the pairs loaded so far, the first included (for tests).
func (c *Certificate) Loads() int64 { return c.loads.Load() }

// Reload reads the files again. On success the new pair serves every handshake
// from then on; on failure the current pair stays and the error says why.
func (c *Certificate) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = c.stat()
	return c.reloadLocked()
}

func (c *Certificate) reloadLocked() error {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("load TLS certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	leaf := pair.Leaf // parsed by LoadX509KeyPair
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return fmt.Errorf("parse TLS certificate %s: %w", c.certFile, err)
		}
		pair.Leaf = leaf
	}
	c.current.Store(&pair)
	c.loads.Add(1)
	level, left := slog.LevelInfo, time.Until(leaf.NotAfter)
	if left < expiryWarning {
		level = slog.LevelWarn
	}
	c.log.LogAttrs(context.Background(), level, "TLS certificate loaded",
		slog.String("subject", leaf.Subject.String()), slog.String("names", strings.Join(names(leaf), ",")),
		slog.Time("not_after", leaf.NotAfter), slog.Duration("valid_for", left.Truncate(time.Second)),
		slog.String("sha256", Fingerprint(leaf)))
	return nil
}

// Watch reloads the pair whenever a value arrives on hup (SIGHUP) and whenever
// Watch finds either file changed, looking every poll (DefaultPollInterval when
// zero or less), until ctx ends. Failures are logged; the current pair stays.
func (c *Certificate) Watch(ctx context.Context, poll time.Duration, hup <-chan os.Signal) {
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			c.log.Info("reloading the TLS certificate (SIGHUP)")
			if err := c.Reload(); err != nil {
				c.log.Error("TLS certificate reload failed; serving the previous one", "error", err)
			}
		case <-t.C:
			if err := c.reloadIfChanged(); err != nil {
				c.log.Error("TLS certificate files changed but do not load; serving the previous one", "error", err)
			}
		}
	}
}

// reloadIfChanged reloads when the files differ from what the last attempt saw.
// A broken pair is tried once per change, not on every poll.
func (c *Certificate) reloadIfChanged() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.stat()
	if now == c.seen {
		return nil
	}
	c.seen = now
	return c.reloadLocked()
}

// stamp is what a file change alters: the file stat(2) finds (through symbolic
// links) — its device and inode (a rename or a moved link), its size and its
// modification time (an in-place rewrite) — for the certificate and the key.
type stamp struct{ cert, key fileStamp }

type fileStamp struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
	missing  bool
}

func (c *Certificate) stat() stamp {
	return stamp{cert: statFile(c.certFile), key: statFile(c.keyFile)}
}

func statFile(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{missing: true}
	}
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	s.dev, s.ino = fileID(fi)
	return s
}

// Fingerprint is the SHA-256 of a certificate's DER, in hexadecimal.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

func names(c *x509.Certificate) []string {
	out := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}
