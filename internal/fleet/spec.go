package fleet

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
)

// ClusterSpec is what an admin gives to register a cluster (docs/design.md §3.4). Exactly one
// TLS trust setting must be chosen: TLSFingerprint, CACert, or InsecureSkipVerify.
type ClusterSpec struct {
	Name      string
	Endpoints []string // https://host[:port], tried in this order
	TokenID   string   // USER@REALM!TOKENID
	// TokenSecret is the PVE API token's secret; it is sealed before it is stored and
	// never returned.
	TokenSecret string
	// TLSFingerprint pins the certificate of the first endpoint that answers (SHA-256,
	// AB:CD:… form, either case). The other nodes' fingerprints are learned from PVE over
	// that pinned connection.
	TLSFingerprint     string
	CACert             string // PEM bundle that signs every node's certificate
	InsecureSkipVerify bool   // no certificate check at all; must be asked for explicitly
}

// ClusterPatch changes a registered cluster; nil fields stay as they are. Giving any of
// TLSFingerprint, CACert or InsecureSkipVerify replaces the trust setting as a whole
// (the ones left out are cleared), so the result again has exactly one.
type ClusterPatch struct {
	Name               *string
	Endpoints          *[]string
	TokenID            *string
	TokenSecret        *string
	TLSFingerprint     *string
	CACert             *string
	InsecureSkipVerify *bool
}

// Trust modes of a cluster, as shown to admins.
const (
	TrustFingerprint = "fingerprint"
	TrustCA          = "ca"
	TrustInsecure    = "insecure"
)

// Limits on what a cluster may hold.
const (
	maxNameLen     = 64
	maxEndpoints   = 32
	maxCACertLen   = 32 << 10
	maxEndpointLen = 300
)

var (
	clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

func invalid(format string, args ...any) *errs.Error {
	return errs.E(errs.Invalid, format, args...)
}

// validName checks a cluster name.
func validName(name string) error {
	if name == "" {
		return invalid("name is required")
	}
	if len(name) > maxNameLen || !clusterNameRE.MatchString(name) {
		return invalid("name must be 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", maxNameLen)
	}
	return nil
}

// normalizeEndpoints checks and normalises a list of endpoint URLs to https://host[:port].
func normalizeEndpoints(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, invalid("endpoints must list at least one https://host:port URL")
	}
	if len(in) > maxEndpoints {
		return nil, invalid("at most %d endpoints", maxEndpoints)
	}
	out := make([]string, 0, len(in))
	seen := map[string]bool{}
	for _, raw := range in {
		u, err := normalizeEndpoint(raw)
		if err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, invalid("endpoint %s is listed twice", u)
		}
		seen[u] = true
		out = append(out, u)
	}
	return out, nil
}

func normalizeEndpoint(raw string) (string, error) {
	bad := func(why string) error {
		return invalid("endpoint %q %s; expected https://host[:port], e.g. https://10.0.0.1:8006", quoteSafe(raw), why)
	}
	if len(raw) > maxEndpointLen {
		return "", invalid("an endpoint is longer than %d characters", maxEndpointLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", bad("is not a URL")
	}
	switch {
	case !strings.EqualFold(u.Scheme, "https"):
		return "", bad("must use https")
	case u.Opaque != "" || u.Host == "":
		return "", bad("has no host")
	case u.User != nil:
		return "", bad("must not hold a user name or password")
	case u.Path != "" && u.Path != "/":
		return "", bad("must not have a path")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#"):
		return "", bad("must not have a query or fragment")
	}
	host := strings.ToLower(u.Hostname())
	if host == "" || strings.ContainsAny(host, " %") {
		return "", bad("has no valid host")
	}
	if ip := net.ParseIP(host); ip == nil && !validHostname(host) {
		return "", bad("has no valid host")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", bad("has an invalid port")
		}
		return "https://" + net.JoinHostPort(host, strconv.Itoa(n)), nil
	}
	if strings.HasSuffix(u.Host, ":") {
		return "", bad("has an empty port")
	}
	if strings.Contains(host, ":") { // IPv6 without a port
		return "https://[" + host + "]", nil
	}
	return "https://" + host, nil
}

// validHostname accepts DNS names: labels of letters, digits and hyphens.
func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// checkToken checks a token id and secret the way the PVE client will (it refuses
// what PVE's header parsing would mangle), before anything is sent anywhere.
func checkToken(tokenID, secret string) error {
	if tokenID == "" {
		return invalid("tokenId is required (USER@REALM!TOKENID, e.g. vmgate@pve!gw)")
	}
	if secret == "" {
		return invalid("tokenSecret is required")
	}
	cl, err := pve.New(pve.Config{Endpoints: []pve.Endpoint{{URL: "https://localhost"}}, TokenID: tokenID, TokenSecret: secret})
	if err != nil {
		return invalid("%s", clientConfigText(err))
	}
	cl.Close()
	return nil
}

// clientConfigText is the PVE client's complaint about its configuration, without
// its package prefix.
func clientConfigText(err error) string {
	t := strings.TrimPrefix(err.Error(), "pve: ")
	return strings.TrimPrefix(t, pve.ErrInvalidArgument.Error()+": ")
}

func validCACert(pemText string) error {
	if len(pemText) > maxCACertLen {
		return invalid("caCert is longer than %d bytes", maxCACertLen)
	}
	rest := []byte(pemText)
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return invalid("caCert must hold only PEM CERTIFICATE blocks, not %q", quoteSafe(block.Type))
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return invalid("caCert holds a certificate that does not parse: %s", quoteSafe(err.Error()))
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return invalid("caCert must be one or more PEM certificates (-----BEGIN CERTIFICATE-----)")
	}
	return nil
}

// trust is a validated TLS trust choice.
type trust struct {
	mode        string // TrustFingerprint, TrustCA, TrustInsecure
	fingerprint string // normalised; TrustFingerprint only, may be empty on update (stored pins are used)
	caCert      string // TrustCA only
}

// checkTrust enforces exactly one trust choice.
func checkTrust(fingerprint, caCert string, insecure bool) (trust, error) {
	n := 0
	for _, set := range []bool{fingerprint != "", caCert != "", insecure} {
		if set {
			n++
		}
	}
	if n != 1 {
		return trust{}, invalid("choose exactly one TLS trust setting: tlsFingerprint (the SHA-256 fingerprint of the endpoint's certificate), caCert (a PEM bundle), or insecureSkipVerify: true")
	}
	switch {
	case fingerprint != "":
		fp, err := pve.NormalizeFingerprint(fingerprint)
		if err != nil {
			return trust{}, invalid("tlsFingerprint %q is not a SHA-256 fingerprint (32 hex pairs, AB:CD:…); PVE shows it under the node's Certificates", quoteSafe(fingerprint))
		}
		return trust{mode: TrustFingerprint, fingerprint: fp}, nil
	case caCert != "":
		if err := validCACert(caCert); err != nil {
			return trust{}, err
		}
		return trust{mode: TrustCA, caCert: caCert}, nil
	default:
		return trust{mode: TrustInsecure}, nil
	}
}

// validSpec is a checked and normalised ClusterSpec.
type validSpec struct {
	name      string
	endpoints []string
	tokenID   string
	secret    string
	trust     trust
}

func (spec ClusterSpec) validate() (validSpec, error) {
	var v validSpec
	var err error
	if err = validName(spec.Name); err != nil {
		return v, err
	}
	if v.endpoints, err = normalizeEndpoints(spec.Endpoints); err != nil {
		return v, err
	}
	if err = checkToken(spec.TokenID, spec.TokenSecret); err != nil {
		return v, err
	}
	if v.trust, err = checkTrust(spec.TLSFingerprint, spec.CACert, spec.InsecureSkipVerify); err != nil {
		return v, err
	}
	v.name, v.tokenID, v.secret = spec.Name, spec.TokenID, spec.TokenSecret
	return v, nil
}

// quoteSafe shortens outside text and escapes it before it goes into a message.
func quoteSafe(s string) string { return clip(s, 80) }

// clip cuts s to at most max bytes and escapes what a message should not carry raw
// (control characters, quotes, invalid UTF-8).
func clip(s string, max int) string {
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "…"
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func itoa(n int) string { return strconv.Itoa(n) }
