package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/store"
)

// TestClientAddress: the forwarding headers are believed only from configured
// proxies (docs/security.md items 15, 28), walked from the right to the first hop that is not
// a trusted proxy, and parsed strictly in every form they come in; what cannot be
// parsed is an error (400), never the proxy's own address.
func TestClientAddress(t *testing.T) {
	t.Parallel()
	ps, err := parseProxies([]string{"10.0.0.0/8", "192.0.2.7", "2001:db8:ffff::/48", " "})
	if err != nil {
		t.Fatal(err)
	}
	const proxy = "10.1.2.3:4000"
	type hdr = []string // "Name: value" lines, in order
	for _, c := range []struct {
		name, remote string
		headers      hdr
		proxies      proxies
		want         string // "" means an error
	}{
		// Who is believed.
		{"no proxies configured: header ignored", "203.0.113.5:4000", hdr{"X-Forwarded-For: 198.51.100.1"}, nil, "203.0.113.5"},
		{"untrusted peer: header ignored", "203.0.113.5:4000", hdr{"X-Forwarded-For: 198.51.100.1"}, ps, "203.0.113.5"},
		{"untrusted peer: garbage ignored too", "203.0.113.5:4000", hdr{"X-Forwarded-For: ]]]"}, ps, "203.0.113.5"},
		{"trusted proxy without a header: its own request", proxy, nil, ps, "10.1.2.3"},
		{"IPv4-mapped peer", "[::ffff:10.1.2.3]:4000", hdr{"X-Forwarded-For: 198.51.100.1"}, ps, "198.51.100.1"},
		{"IPv6 peer", "[2001:db8:ffff::9]:4000", hdr{"X-Forwarded-For: 198.51.100.1"}, ps, "198.51.100.1"},

		// X-Forwarded-For forms.
		{"XFF IPv4", proxy, hdr{"X-Forwarded-For: 198.51.100.1"}, ps, "198.51.100.1"},
		{"XFF IPv4 with port", proxy, hdr{"X-Forwarded-For: 192.0.2.1:80"}, ps, "192.0.2.1"},
		{"XFF bare IPv6", proxy, hdr{"X-Forwarded-For: 2001:db8::1"}, ps, "2001:db8::1"},
		{"XFF bracketed IPv6", proxy, hdr{"X-Forwarded-For: [2001:db8::1]"}, ps, "2001:db8::1"},
		{"XFF bracketed IPv6 with port", proxy, hdr{"X-Forwarded-For: [2001:db8::1]:4711"}, ps, "2001:db8::1"},
		{"XFF IPv4-mapped IPv6", proxy, hdr{"X-Forwarded-For: ::ffff:198.51.100.1"}, ps, "198.51.100.1"},
		{"XFF spaces and tabs", proxy, hdr{"X-Forwarded-For:  198.51.100.1 ,\t192.0.2.7 "}, ps, "198.51.100.1"},
		{"XFF chain of trusted proxies", proxy, hdr{"X-Forwarded-For: 198.51.100.1, 192.0.2.7, 10.9.9.9"}, ps, "198.51.100.1"},
		{"XFF spoofed left part is not believed", proxy, hdr{"X-Forwarded-For: 1.1.1.1, 198.51.100.1"}, ps, "198.51.100.1"},
		{"XFF several header lines", proxy, hdr{"X-Forwarded-For: 1.1.1.1", "X-Forwarded-For: 198.51.100.1"}, ps, "198.51.100.1"},
		{"XFF empty elements skipped", proxy, hdr{"X-Forwarded-For: , 198.51.100.1,"}, ps, "198.51.100.1"},
		{"XFF only proxies: the leftmost", proxy, hdr{"X-Forwarded-For: 10.4.4.4, 192.0.2.7"}, ps, "10.4.4.4"},
		{"XFF garbage hop", proxy, hdr{"X-Forwarded-For: 198.51.100.1, not-an-ip"}, ps, ""},
		{"XFF garbage anywhere", proxy, hdr{"X-Forwarded-For: not-an-ip, 198.51.100.1"}, ps, ""},
		{"XFF unknown client", proxy, hdr{"X-Forwarded-For: unknown"}, ps, ""},
		{"XFF unknown left of the client", proxy, hdr{"X-Forwarded-For: unknown, 198.51.100.1"}, ps, "198.51.100.1"},
		{"XFF empty header", proxy, hdr{"X-Forwarded-For: "}, ps, ""},
		{"XFF IPv6 with a port but no brackets", proxy, hdr{"X-Forwarded-For: 2001:db8::1:4711x"}, ps, ""},
		{"XFF IPv4 in brackets", proxy, hdr{"X-Forwarded-For: [192.0.2.1]"}, ps, ""},
		{"XFF unclosed bracket", proxy, hdr{"X-Forwarded-For: [2001:db8::1"}, ps, ""},
		{"XFF port too large", proxy, hdr{"X-Forwarded-For: 192.0.2.1:65536"}, ps, ""},
		{"XFF empty port", proxy, hdr{"X-Forwarded-For: 192.0.2.1:"}, ps, ""},
		{"XFF signed port", proxy, hdr{"X-Forwarded-For: 192.0.2.1:+80"}, ps, ""},
		{"XFF zone", proxy, hdr{"X-Forwarded-For: fe80::1%eth0"}, ps, ""},
		{"XFF host name", proxy, hdr{"X-Forwarded-For: client.example"}, ps, ""},
		{"XFF obfuscated identifiers are RFC 7239's only", proxy, hdr{"X-Forwarded-For: _hidden"}, ps, ""},

		// RFC 7239 Forwarded forms.
		{"Forwarded IPv4", proxy, hdr{"Forwarded: for=192.0.2.60"}, ps, "192.0.2.60"},
		{"Forwarded with proto and by", proxy, hdr{"Forwarded: for=192.0.2.60;proto=http;by=203.0.113.43"}, ps, "192.0.2.60"},
		{"Forwarded quoted IPv4 with port", proxy, hdr{`Forwarded: for="192.0.2.60:80"`}, ps, "192.0.2.60"},
		{"Forwarded IPv6 with port", proxy, hdr{`Forwarded: for="[2001:db8::1]:4711"`}, ps, "2001:db8::1"},
		{"Forwarded IPv6 without port", proxy, hdr{`Forwarded: For="[2001:db8:cafe::17]"`}, ps, "2001:db8:cafe::17"},
		{"Forwarded case-insensitive names", proxy, hdr{"Forwarded: FOR=192.0.2.60;Proto=https"}, ps, "192.0.2.60"},
		{"Forwarded hops, spaces", proxy, hdr{"Forwarded: for=198.51.100.17 , for=192.0.2.7;by=10.1.2.3, for=10.5.5.5"}, ps, "198.51.100.17"},
		{"Forwarded several lines", proxy, hdr{"Forwarded: for=1.1.1.1", "Forwarded: for=198.51.100.17"}, ps, "198.51.100.17"},
		{"Forwarded obfuscated client", proxy, hdr{"Forwarded: for=_hidden, for=192.0.2.7"}, ps, "_hidden"},
		{"Forwarded obfuscated port", proxy, hdr{`Forwarded: for="198.51.100.17:_port"`}, ps, "198.51.100.17"},
		{"Forwarded quoted pair", proxy, hdr{`Forwarded: for="\_hid\den"`}, ps, "_hidden"},
		{"Forwarded host and extension", proxy, hdr{`Forwarded: for=192.0.2.60;host="vmgate.example:443";ext=x`}, ps, "192.0.2.60"},
		{"Forwarded empty elements skipped", proxy, hdr{"Forwarded: , for=192.0.2.60,"}, ps, "192.0.2.60"},
		{"Forwarded unknown client", proxy, hdr{"Forwarded: for=unknown"}, ps, ""},
		{"Forwarded unknown left of the client", proxy, hdr{"Forwarded: for=unknown, for=198.51.100.17"}, ps, "198.51.100.17"},
		{"Forwarded unquoted port", proxy, hdr{"Forwarded: for=192.0.2.60:80"}, ps, ""},
		{"Forwarded unquoted IPv6", proxy, hdr{"Forwarded: for=[2001:db8::1]"}, ps, ""},
		{"Forwarded IPv6 without brackets", proxy, hdr{`Forwarded: for="2001:db8::1"`}, ps, ""},
		{"Forwarded unclosed quote swallowing the proxy's hop", proxy, hdr{`Forwarded: for="1.1.1.1, for=198.51.100.17`}, ps, ""},
		{"Forwarded for= twice", proxy, hdr{"Forwarded: for=192.0.2.60;for=198.51.100.17"}, ps, ""},
		{"Forwarded element without for=", proxy, hdr{"Forwarded: for=198.51.100.17, proto=https"}, ps, ""},
		{"Forwarded bad by=", proxy, hdr{"Forwarded: for=192.0.2.60;by=\"x y\""}, ps, ""},
		{"Forwarded pair without value", proxy, hdr{"Forwarded: for="}, ps, ""},
		{"Forwarded junk", proxy, hdr{"Forwarded: for=192.0.2.60 junk"}, ps, ""},
		{"Forwarded empty header", proxy, hdr{"Forwarded: "}, ps, ""},
		{"Forwarded control character", proxy, hdr{"Forwarded: for=\"1.2.3.4\x01\""}, ps, ""},

		// Both headers.
		{"both agree", proxy, hdr{"X-Forwarded-For: 198.51.100.1", "Forwarded: for=198.51.100.1"}, ps, "198.51.100.1"},
		{"both disagree: one came from the client", proxy, hdr{"X-Forwarded-For: 198.51.100.1", "Forwarded: for=203.0.113.66"}, ps, ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		for _, h := range c.headers {
			k, v, _ := strings.Cut(h, ":")
			r.Header.Add(k, strings.TrimPrefix(v, " "))
		}
		got, err := c.proxies.resolve(r)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s: %q, want an error", c.name, got)
		case c.want != "" && err != nil:
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		case c.want != "" && got != c.want:
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		case testing.Verbose() && err != nil:
			t.Logf("%s: %v", c.name, err)
		}
	}
	if _, err := parseProxies([]string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad CIDR was accepted")
	}
	if _, err := parseProxies([]string{"proxy.example"}); err == nil {
		t.Error("a host name was accepted as a proxy address")
	}
}

// proxiedEnv is a test env whose server trusts 10.0.0.0/8 as proxies, with an
// injected clock for auth.
type proxiedEnv struct {
	*testEnv
	clock *fakeClock
}

// fakeClock is an injected clock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func newProxiedEnv(t *testing.T) *proxiedEnv {
	clock := &fakeClock{now: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
	e := newTestEnvWith(t, auth.Config{Argon2: auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		PerAddressRate: rate.Inf, PerAddressBurst: 1, Now: clock.Now, RefusalPause: -1})
	cfg := e.apiConfig()
	cfg.TrustedProxies = []string{"10.0.0.0/8"}
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.api, e.h = api, apitest.Wrap(t, api)
	return &proxiedEnv{testEnv: e, clock: clock}
}

// loginVia posts a login through the trusted proxy 10.0.0.1 with one forwarding
// header ("Name: value").
func (e *proxiedEnv) loginVia(header, email, password string) *httptest.ResponseRecorder {
	r := bearerReq("POST", "/api/v1/user/login", "", fmt.Sprintf(`{"email":%q,"password":%q}`, email, password))
	r.RemoteAddr = "10.0.0.1:5000"
	k, v, _ := strings.Cut(header, ": ")
	r.Header.Set(k, v)
	return e.send(r)
}

// TestForwardedHeadersOverHTTP (docs/security.md item 28): through a trusted proxy, a
// forwarding header that cannot be parsed answers 400 invalid_request and reaches
// no use case; a good one makes the client the one that is throttled and audited.
func TestForwardedHeadersOverHTTP(t *testing.T) {
	e := newProxiedEnv(t)
	e.addUser("ann", store.RoleUser)
	before, err := e.store.ListAudit(t.Context(), 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"X-Forwarded-For: 198.51.100.1:99999",
		"X-Forwarded-For: unknown",
		`Forwarded: for="[2001:db8::1`,
		"Forwarded: for=2001:db8::1",
	} {
		w := e.loginVia(bad, "ann@example.org", envPassword)
		if env := envelopeOf(t, w); w.Code != http.StatusBadRequest || env.Reason != "invalid_request" {
			t.Errorf("%s: %d %s, want 400 invalid_request", bad, w.Code, w.Body)
		}
	}
	if recs, _ := e.store.ListAudit(t.Context(), 100, 0); len(recs) != len(before) {
		t.Fatalf("refused requests reached the login: %+v", recs)
	}
	for _, good := range []struct{ header, addr string }{
		{"X-Forwarded-For: [2001:db8::1]:4711, 10.0.0.2", "2001:db8::1"},
		{`Forwarded: for="[2001:db8::2]:4711";proto=https, for=10.0.0.2`, "2001:db8::2"},
		{"X-Forwarded-For: 192.0.2.1:80", "192.0.2.1"},
		{"Forwarded: for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"},
	} {
		if w := e.loginVia(good.header, "ann@example.org", envPassword); w.Code != http.StatusOK {
			t.Errorf("%s: %d %s", good.header, w.Code, w.Body)
			continue
		}
		recs, err := e.store.ListAudit(t.Context(), 1, 0)
		if err != nil || len(recs) != 1 || recs[0].Action != "auth.login" || recs[0].Address != good.addr {
			t.Errorf("%s: audited %+v %v, want auth.login from %s", good.header, recs, err, good.addr)
		}
	}
}

// TestLoginLockoutIsPerNetworkOverHTTP (docs/security.md item 28, issue 9 (docs/history.md)): 200 wrong
// passwords for the admin from one client behind the proxy, then the right
// password from another network gets a token at once; the attacker's /64 stays
// delayed whichever of its addresses it uses, and the lockout is audited with it.
func TestLoginLockoutIsPerNetworkOverHTTP(t *testing.T) {
	e := newProxiedEnv(t)
	e.addUser("root", store.RoleAdmin)
	limited := 0
	for i := range 200 {
		w := e.loginVia(fmt.Sprintf("X-Forwarded-For: 2001:db8:bad:1::%x", i+1), "root@example.org", "a wrong guess!!")
		switch w.Code {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			limited++
			if w.Header().Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		default:
			t.Fatalf("wrong password %d: %d %s", i, w.Code, w.Body)
		}
	}
	if limited != 195 {
		t.Fatalf("%d of 200 wrong passwords from one /64 were delayed, want 195", limited)
	}
	if w := e.loginVia("X-Forwarded-For: 2001:db8:600d:1::1", "root@example.org", envPassword); w.Code != http.StatusOK {
		t.Fatalf("the owner on another network: %d %s", w.Code, w.Body)
	}
	if w := e.loginVia("X-Forwarded-For: 2001:db8:bad:1::ffff", "root@example.org", envPassword); w.Code != http.StatusTooManyRequests {
		t.Fatalf("the right password from the attacker's /64 during its delay: %d", w.Code)
	}
	recs, err := e.store.ListAudit(t.Context(), 500, 0)
	if err != nil {
		t.Fatal(err)
	}
	lockouts := 0
	for _, r := range recs {
		if r.Action != "auth.lockout" {
			continue
		}
		lockouts++
		var p struct{ Scope, Network string }
		if err := json.Unmarshal([]byte(r.Params), &p); err != nil || p.Scope != "network" || p.Network != "2001:db8:bad:1::/64" ||
			!strings.HasPrefix(r.Address, "2001:db8:bad:1::") {
			t.Errorf("lockout record %+v", r)
		}
	}
	if lockouts != 1 {
		t.Fatalf("%d lockout records, want 1", lockouts)
	}
}

// FuzzClientAddress: whatever a trusted proxy forwards, resolving never panics,
// and what it accepts is an address or an RFC 7239 obfuscated identifier.
func FuzzClientAddress(f *testing.F) {
	for _, seed := range [][2]string{
		{"198.51.100.1, 10.0.0.2", ""},
		{"[2001:db8::1]:4711", ""},
		{"", `for="[2001:db8::1]:4711";proto=https, for=10.0.0.2`},
		{"", `for=_hidden;by="_x:_y", for=unknown`},
		{"192.0.2.1:80", "for=192.0.2.1"},
		{",,", `for="\"`},
	} {
		f.Add(seed[0], seed[1])
	}
	ps, err := parseProxies([]string{"10.0.0.0/8"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, xff, fwd string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:5000"
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		if fwd != "" {
			r.Header.Set("Forwarded", fwd)
		}
		got, err := ps.resolve(r)
		if err != nil {
			return
		}
		if _, perr := parseIP(got); perr != nil && !obfuscated(got) {
			t.Fatalf("resolved %q from %q / %q", got, xff, fwd)
		}
	})
}
