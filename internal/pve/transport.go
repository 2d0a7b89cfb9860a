package pve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fingerprint returns the SHA-256 fingerprint of a DER certificate the way PVE
// shows it (/nodes ssl_fingerprint, pvenode cert info): upper-case hex pairs
// joined by colons.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return formatFingerprint(sum[:])
}

func formatFingerprint(b []byte) string {
	h := strings.ToUpper(hex.EncodeToString(b))
	var sb strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			sb.WriteByte(':')
		}
		sb.WriteString(h[i : i+2])
	}
	return sb.String()
}

// ParseFingerprint reads a SHA-256 fingerprint "AB:CD:..." (32 colon-separated
// hex pairs, either case) and returns its bytes.
func ParseFingerprint(s string) ([]byte, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != sha256.Size {
		return nil, fmt.Errorf("%w: fingerprint %q: want %d colon-separated hex pairs", ErrInvalidArgument, truncate(s, 120), sha256.Size)
	}
	out := make([]byte, 0, sha256.Size)
	for _, p := range parts {
		if len(p) != 2 || !isHex(p, 2, 2) {
			return nil, fmt.Errorf("%w: fingerprint %q: %q is not a hex pair", ErrInvalidArgument, truncate(s, 120), p)
		}
		b, _ := hex.DecodeString(p)
		out = append(out, b...)
	}
	return out, nil
}

// NormalizeFingerprint returns s in canonical form (upper case), or an error.
func NormalizeFingerprint(s string) (string, error) {
	b, err := ParseFingerprint(s)
	if err != nil {
		return "", err
	}
	return formatFingerprint(b), nil
}

// endpoint is one configured API address with its trust setting and breaker.
type endpoint struct {
	cfg  Endpoint // normalised
	base string   // https://host[:port], no trailing slash
	addr string   // host:port as the transport dials it
	tls  *tls.Config
	br   breaker
}

// parseEndpointURL checks an endpoint URL: https, a host, nothing else but an
// optional port and "/".
func parseEndpointURL(raw string) (base, addr, host string, err error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", "", "", fmt.Errorf("endpoint %q: %w", truncate(raw, 120), err)
	}
	switch {
	case u.Scheme != "https":
		return "", "", "", fmt.Errorf("endpoint %q: scheme must be https", truncate(raw, 120))
	case u.Opaque != "" || u.User != nil:
		return "", "", "", fmt.Errorf("endpoint %q: no user info or opaque part allowed", truncate(raw, 120))
	case u.Hostname() == "":
		return "", "", "", fmt.Errorf("endpoint %q: no host", truncate(raw, 120))
	case u.Path != "" && u.Path != "/":
		return "", "", "", fmt.Errorf("endpoint %q: no path allowed (the client adds /api2/json)", truncate(raw, 120))
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", "", "", fmt.Errorf("endpoint %q: no query or fragment allowed", truncate(raw, 120))
	}
	host = u.Hostname()
	for i := 0; i < len(host); i++ {
		c := host[i]
		if c <= ' ' || c >= 0x7f {
			return "", "", "", fmt.Errorf("endpoint %q: host must be ASCII (use punycode)", truncate(raw, 120))
		}
	}
	port := u.Port()
	if port == "" {
		port = "443"
	} else if len(port) > 5 || port == "0" {
		return "", "", "", fmt.Errorf("endpoint %q: bad port", truncate(raw, 120))
	}
	return "https://" + u.Host, net.JoinHostPort(host, port), host, nil
}

// tlsConfigFor builds the TLS configuration of one endpoint.
//
//   - Pinned fingerprint: Go's chain verification is switched off
//     (InsecureSkipVerify) because PVE's certificates are usually signed by
//     the cluster's own CA or self-signed, and VerifyConnection does the real
//     check instead: the leaf certificate's SHA-256 must equal the pin. Expiry
//     and names are not checked — a pin names one exact certificate, as PVE's
//     own node-to-node pinning does. Session resumption is off (no
//     ClientSessionCache), and VerifyConnection runs on every handshake anyway.
//   - No pin, Config.InsecureSkipVerify: nothing is verified (asked for explicitly).
//   - Otherwise: Go's normal verification (chain to the CA bundle, or the
//     system roots, and the host name or IP address).
func tlsConfigFor(ep Endpoint, host string, roots *x509.CertPool, insecure bool) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: host,
		NextProtos: []string{"http/1.1"}, // pveproxy speaks HTTP/1.1 only
	}
	if ep.Fingerprint != "" {
		pin, _ := ParseFingerprint(ep.Fingerprint) // validated in New
		expected := formatFingerprint(pin)
		cfg.InsecureSkipVerify = true // the pin below is the verification
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return &TLSError{Endpoint: ep.URL, Expected: expected}
			}
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if subtle.ConstantTimeCompare(sum[:], pin) != 1 {
				return &TLSError{Endpoint: ep.URL, Expected: expected, Presented: formatFingerprint(sum[:])}
			}
			return nil
		}
		return cfg
	}
	if insecure {
		cfg.InsecureSkipVerify = true
		return cfg
	}
	cfg.RootCAs = roots // nil: the system roots
	return cfg
}

// dialTLS is the transport's only way to open a connection: it finds the
// endpoint by address, connects, and completes the handshake with that
// endpoint's TLS configuration, so every connection is verified by the rule of
// the endpoint it goes to. It also counts new connections.
func (c *Client) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	ep := c.byAddr[addr]
	if ep == nil {
		// Unreachable: requests are only built from configured endpoints.
		return nil, fmt.Errorf("pve: refusing to connect to unconfigured address %s", addr)
	}
	d := net.Dialer{Timeout: c.dialTimeout, KeepAlive: 30 * time.Second}
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, ep.tls)
	hctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	defer cancel()
	if err := conn.HandshakeContext(hctx); err != nil {
		raw.Close()
		var te *TLSError
		if errors.As(err, &te) {
			return nil, te
		}
		var cve *tls.CertificateVerificationError
		if errors.As(err, &cve) {
			te := &TLSError{Endpoint: ep.cfg.URL, Err: cve.Err}
			if len(cve.UnverifiedCertificates) > 0 {
				te.Presented = Fingerprint(cve.UnverifiedCertificates[0].Raw)
			}
			return nil, te
		}
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	c.stats.newConns.Add(1)
	return &countedConn{Conn: conn, closed: &c.stats.closedConns}, nil
}

// countedConn counts its first Close in Stats.ClosedConns. net/http's
// transport closes a connection the server ended (Connection: close) and also,
// on its own, one whose request writer has not reported "written" within 50 ms
// of the answer being read (maxWriteWaitBeforeConnReuse, which a loaded
// machine reaches): ClosedConns minus ServerCloses counts those drops, so a
// new connection can be told apart from one that replaces a closed one.
type countedConn struct {
	net.Conn
	once   sync.Once
	closed *atomic.Int64
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.closed.Add(1) })
	return c.Conn.Close()
}
