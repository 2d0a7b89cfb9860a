package httpapi

import (
	"net/http/httptest"
	"testing"
)

// TestClientAddress: X-Forwarded-For is believed only from configured proxies
// (SECURITY.md 15), so a client cannot dodge the per-address login limit by sending
// its own header.
func TestClientAddress(t *testing.T) {
	ps, err := parseProxies([]string{"10.0.0.0/8", "192.0.2.7", " "})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, remote string
		xff          []string
		proxies      proxies
		want         string
	}{
		{"no proxies configured: header ignored", "203.0.113.5:4000", []string{"198.51.100.1"}, nil, "203.0.113.5"},
		{"untrusted peer: header ignored", "203.0.113.5:4000", []string{"198.51.100.1"}, ps, "203.0.113.5"},
		{"trusted proxy: client from header", "10.1.2.3:4000", []string{"198.51.100.1"}, ps, "198.51.100.1"},
		{"chain of trusted proxies", "10.1.2.3:4000", []string{"198.51.100.1, 192.0.2.7, 10.9.9.9"}, ps, "198.51.100.1"},
		{"spoofed left part is not believed", "10.1.2.3:4000", []string{"1.1.1.1, 198.51.100.1"}, ps, "198.51.100.1"},
		{"several header lines", "10.1.2.3:4000", []string{"1.1.1.1", "198.51.100.1"}, ps, "198.51.100.1"},
		{"garbage hop stops the walk", "10.1.2.3:4000", []string{"198.51.100.1, not-an-ip"}, ps, "10.1.2.3"},
		{"only proxies: the last proxy", "10.1.2.3:4000", []string{"10.4.4.4"}, ps, "10.4.4.4"},
		{"IPv4-mapped peer", "[::ffff:10.1.2.3]:4000", []string{"198.51.100.1"}, ps, "198.51.100.1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := c.proxies.resolve(r); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if _, err := parseProxies([]string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad CIDR was accepted")
	}
	if _, err := parseProxies([]string{"proxy.example"}); err == nil {
		t.Error("a host name was accepted as a proxy address")
	}
}
