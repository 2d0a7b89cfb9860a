package fleet

import (
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
)

const testFP = "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89"

func goodSpec() ClusterSpec {
	return ClusterSpec{Name: "prod-1", Endpoints: []string{"https://10.0.0.1:8006"}, TokenID: "vmgate@pve!gw",
		TokenSecret: "5d1f6a2e-0c7b-4b8e-9d2a-3f4e5a6b7c8d", TLSFingerprint: testFP}
}

func TestSpecValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mod  func(*ClusterSpec)
		want string // "" = valid
	}{
		{"good", func(*ClusterSpec) {}, ""},
		{"lower-case fingerprint", func(s *ClusterSpec) { s.TLSFingerprint = strings.ToLower(testFP) }, ""},
		{"no name", func(s *ClusterSpec) { s.Name = "" }, "name is required"},
		{"long name", func(s *ClusterSpec) { s.Name = strings.Repeat("a", 65) }, "name must be"},
		{"name with slash", func(s *ClusterSpec) { s.Name = "a/b" }, "name must be"},
		{"name with space", func(s *ClusterSpec) { s.Name = "a b" }, "name must be"},
		{"no endpoints", func(s *ClusterSpec) { s.Endpoints = nil }, "at least one"},
		{"http", func(s *ClusterSpec) { s.Endpoints = []string{"http://10.0.0.1:8006"} }, "must use https"},
		{"path", func(s *ClusterSpec) { s.Endpoints = []string{"https://10.0.0.1:8006/api2/json"} }, "must not have a path"},
		{"query", func(s *ClusterSpec) { s.Endpoints = []string{"https://10.0.0.1:8006?x=1"} }, "query"},
		{"fragment", func(s *ClusterSpec) { s.Endpoints = []string{"https://10.0.0.1:8006#x"} }, "query or fragment"},
		{"userinfo", func(s *ClusterSpec) { s.Endpoints = []string{"https://root:pw@10.0.0.1:8006"} }, "user name"},
		{"bad port", func(s *ClusterSpec) { s.Endpoints = []string{"https://10.0.0.1:99999"} }, "port"},
		{"empty port", func(s *ClusterSpec) { s.Endpoints = []string{"https://10.0.0.1:"} }, "port"},
		{"no host", func(s *ClusterSpec) { s.Endpoints = []string{"https://:8006"} }, "host"},
		{"bad host", func(s *ClusterSpec) { s.Endpoints = []string{"https://a b:8006"} }, "endpoint"},
		{"duplicate", func(s *ClusterSpec) { s.Endpoints = []string{"https://PVE1:8006", "https://pve1:8006/"} }, "listed twice"},
		{"no token", func(s *ClusterSpec) { s.TokenID = "" }, "tokenId is required"},
		{"token without realm", func(s *ClusterSpec) { s.TokenID = "vmgate!gw" }, "token id"},
		{"token without name", func(s *ClusterSpec) { s.TokenID = "vmgate@pve" }, "token id"},
		{"no secret", func(s *ClusterSpec) { s.TokenSecret = "" }, "tokenSecret is required"},
		{"secret with =", func(s *ClusterSpec) { s.TokenSecret = "a=b" }, "token secret"},
		{"no trust", func(s *ClusterSpec) { s.TLSFingerprint = "" }, "exactly one TLS trust"},
		{"two trusts", func(s *ClusterSpec) { s.InsecureSkipVerify = true }, "exactly one TLS trust"},
		{"short fingerprint", func(s *ClusterSpec) { s.TLSFingerprint = "AB:CD" }, "not a SHA-256 fingerprint"},
		{"insecure alone", func(s *ClusterSpec) { s.TLSFingerprint = ""; s.InsecureSkipVerify = true }, ""},
		{"bad CA", func(s *ClusterSpec) { s.TLSFingerprint = ""; s.CACert = "not pem" }, "PEM"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := goodSpec()
			c.mod(&s)
			v, err := s.validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				if v.trust.mode == TrustFingerprint && v.trust.fingerprint != testFP {
					t.Fatalf("fingerprint not normalised: %q", v.trust.fingerprint)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if errs.KindOf(err) != errs.Invalid {
				t.Fatalf("kind %v, want Invalid", errs.KindOf(err))
			}
			if strings.Contains(err.Error(), goodSpec().TokenSecret) {
				t.Fatal("the message echoes the secret")
			}
		})
	}
}

func TestNormalizeEndpoint(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"https://PVE1.example.com:8006": "https://pve1.example.com:8006",
		"HTTPS://10.0.0.1:8006/":        "https://10.0.0.1:8006",
		"https://10.0.0.1":              "https://10.0.0.1",
		"https://[fe80::1]:8006":        "https://[fe80::1]:8006",
		"https://[FE80::1]":             "https://[fe80::1]",
		"https://10.0.0.1:08006":        "https://10.0.0.1:8006",
	}
	for in, want := range cases {
		got, err := normalizeEndpoint(in)
		if err != nil || got != want {
			t.Errorf("normalizeEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
