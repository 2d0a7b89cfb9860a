package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
)

// proxies resolves the client address from the forwarding headers only when the
// direct peer is a configured trusted proxy (docs/security.md items 15, 28).
type proxies []netip.Prefix

func parseProxies(list []string) (proxies, error) {
	var ps proxies
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %w", s, err)
			}
			ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", s, err)
		}
		ps = append(ps, p.Masked())
	}
	return ps, nil
}

func (ps proxies) trusted(a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// resolve returns the client's address. From a peer that is not a trusted proxy
// that is the peer, whatever the headers say. From a trusted proxy it is the first
// hop that is not a trusted proxy, walking the forwarding headers from the right
// (a client can write whatever it likes to the left of the hops the proxies
// append, never to the right of them); when every hop is a trusted proxy, the
// leftmost. An RFC 7239 obfuscated identifier as that hop is the client's name.
//
// Both X-Forwarded-For and RFC 7239 Forwarded are read, each strictly: ports,
// brackets, quotes and spaces where their grammars allow them, nothing else. A
// value that cannot be parsed, a client the proxy calls "unknown", an empty
// header, or two headers naming different clients (a proxy that writes one of
// them passes the other through from the client) is an error — 400 — rather than
// the proxy's own address: falling back to it would put every client behind the
// proxy under one login limit, which one of them could then exhaust for all.
func (ps proxies) resolve(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host, nil
	}
	peer = peer.Unmap()
	if len(ps) == 0 || !ps.trusted(peer) {
		return canonical(host, peer), nil
	}
	client := ""
	for _, h := range []struct {
		name  string
		parse func(string) ([]hop, error)
	}{{"X-Forwarded-For", parseXFF}, {"Forwarded", parseForwarded}} {
		lines := r.Header.Values(h.name)
		if len(lines) == 0 {
			continue
		}
		var hops []hop
		for _, line := range lines {
			hs, err := h.parse(line)
			if err != nil {
				return peer.String(), errForwarded(h.name, err)
			}
			hops = append(hops, hs...)
		}
		c, err := ps.walk(hops)
		if err != nil {
			return peer.String(), errForwarded(h.name, err)
		}
		if client != "" && c != client {
			return peer.String(), errs.E(errs.Invalid,
				"X-Forwarded-For and Forwarded name different clients; a trusted proxy must write one of them")
		}
		client = c
	}
	if client == "" { // the proxy forwarded no header: the request is its own
		return peer.String(), nil
	}
	return client, nil
}

func errForwarded(header string, cause error) error {
	return &errs.Error{Kind: errs.Invalid, Reason: "invalid_request",
		Message: header + " from the trusted proxy cannot be read: " + cause.Error()}
}

// hop is one node a forwarding header names: an address, or for RFC 7239 an
// obfuscated identifier (name) or "unknown" (neither); ok is false for an element
// that names no node (a Forwarded element without for=).
type hop struct {
	addr netip.Addr
	name string
	ok   bool
}

// walk finds the client among the hops: from the right, the first that is not a
// trusted proxy, or the leftmost.
func (ps proxies) walk(hops []hop) (string, error) {
	if len(hops) == 0 {
		return "", fmt.Errorf("it names no hop")
	}
	i := len(hops) - 1
	for i > 0 && hops[i].ok && hops[i].addr.IsValid() && ps.trusted(hops[i].addr) {
		i--
	}
	switch h := hops[i]; {
	case !h.ok:
		return "", fmt.Errorf("hop %d names no node (for=)", i+1)
	case h.addr.IsValid():
		return h.addr.String(), nil
	case h.name != "":
		return h.name, nil
	default:
		return "", fmt.Errorf("the client is \"unknown\"")
	}
}

// parseXFF reads one X-Forwarded-For line: comma-separated nodes, each an IPv4
// address, an IPv6 address bare or in brackets, either with a port after a colon
// (IPv6 only in brackets), or "unknown", with optional spaces around. Empty
// elements are skipped, as RFC 9110 §5.6.1 asks of list headers.
func parseXFF(line string) ([]hop, error) {
	var hops []hop
	for i, el := range strings.Split(line, ",") {
		el = strings.Trim(el, " \t")
		if el == "" {
			continue
		}
		h, err := parseNode(el, true)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i+1, err)
		}
		hops = append(hops, h)
	}
	return hops, nil
}

// parseNode reads a node: the RFC 7239 §6 grammar (IPv4, bracketed IPv6, "unknown"
// or an obfuscated identifier, each with an optional port or obfuscated port), plus
// for X-Forwarded-For (xff) a bare IPv6 address and no obfuscated identifiers.
func parseNode(s string, xff bool) (hop, error) {
	if strings.EqualFold(s, "unknown") {
		return hop{ok: true}, nil
	}
	if strings.Count(s, ":") >= 2 && !strings.HasPrefix(s, "[") {
		if !xff {
			return hop{}, fmt.Errorf("an IPv6 address needs brackets")
		}
		a, err := parseIP(s)
		return hop{addr: a, ok: true}, err
	}
	name, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return hop{}, fmt.Errorf("unclosed bracket")
		}
		name, port = s[:end+1], s[end+1:]
		if port != "" && port[0] != ':' {
			return hop{}, fmt.Errorf("junk after the bracket")
		}
		port = strings.TrimPrefix(port, ":")
		if port == "" && len(s) > end+1 {
			return hop{}, fmt.Errorf("empty port")
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 {
		name, port = s[:i], s[i+1:]
		if port == "" {
			return hop{}, fmt.Errorf("empty port")
		}
	}
	if port != "" && !validPort(port, !xff) {
		return hop{}, fmt.Errorf("bad port")
	}
	switch {
	case strings.HasPrefix(name, "["):
		inner := name[1 : len(name)-1]
		a, err := parseIP(inner)
		if err == nil && !a.Is6() {
			err = fmt.Errorf("an IPv4 address in brackets")
		}
		if err == nil && a.Is4In6() {
			a = a.Unmap()
		}
		return hop{addr: a, ok: true}, err
	case !xff && obfuscated(name):
		return hop{name: name, ok: true}, nil
	}
	a, err := parseIP(name)
	if err == nil && !a.Is4() {
		err = fmt.Errorf("an IPv6 address needs brackets")
	}
	return hop{addr: a, ok: true}, err
}

// parseIP parses an address without a zone, IPv4-mapped IPv6 unmapped.
func parseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("not an IP address")
	}
	return a.Unmap(), nil
}

// validPort accepts 1 to 5 digits up to 65535, and with obf an obfuscated port.
func validPort(p string, obf bool) bool {
	if obf && obfuscated(p) {
		return true
	}
	n, err := strconv.Atoi(p)
	return err == nil && len(p) <= 5 && n >= 0 && n <= 65535 && strings.Trim(p, "0123456789") == ""
}

// obfuscated reports whether s is an RFC 7239 obfnode/obfport: "_" then letters,
// digits, ".", "_" or "-".
func obfuscated(s string) bool {
	if len(s) < 2 || s[0] != '_' {
		return false
	}
	for _, c := range []byte(s[1:]) {
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool { return isAlnum(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 }

// parseForwarded reads one Forwarded line (RFC 7239 §4): comma-separated elements
// of semicolon-separated name=value pairs, each value a token or a quoted string,
// optional spaces around the separators; a parameter at most once per element;
// empty elements skipped. Each element's for= is parsed as a node; by=, host= and
// proto= are checked for syntax only, other extensions allowed.
func parseForwarded(line string) ([]hop, error) {
	var hops []hop
	p := forwardedParser{s: line}
	for n := 1; ; n++ {
		p.space()
		if p.done() {
			return hops, nil
		}
		if p.peek() == ',' {
			p.i++
			continue
		}
		h, err := p.element()
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", n, err)
		}
		hops = append(hops, h)
		p.space()
		if p.done() {
			return hops, nil
		}
		if p.peek() != ',' {
			return nil, fmt.Errorf("element %d: junk after it", n)
		}
		p.i++
	}
}

type forwardedParser struct {
	s string
	i int
}

func (p *forwardedParser) done() bool { return p.i >= len(p.s) }
func (p *forwardedParser) peek() byte { return p.s[p.i] }

func (p *forwardedParser) space() {
	for !p.done() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

func (p *forwardedParser) token() string {
	start := p.i
	for !p.done() && isTchar(p.peek()) {
		p.i++
	}
	return p.s[start:p.i]
}

// element reads pairs up to the next top-level comma or the end.
func (p *forwardedParser) element() (hop, error) {
	var h hop
	seen := map[string]bool{}
	for {
		p.space()
		name := strings.ToLower(p.token())
		if name == "" {
			return hop{}, fmt.Errorf("want a parameter name")
		}
		if seen[name] {
			return hop{}, fmt.Errorf("%s= twice", name)
		}
		seen[name] = true
		if p.done() || p.peek() != '=' {
			return hop{}, fmt.Errorf("%s without =", name)
		}
		p.i++
		value, err := p.value()
		if err != nil {
			return hop{}, fmt.Errorf("%s=: %w", name, err)
		}
		switch name {
		case "for":
			if h, err = parseNode(value, false); err != nil {
				return hop{}, fmt.Errorf("for=: %w", err)
			}
		case "by":
			if _, err := parseNode(value, false); err != nil {
				return hop{}, fmt.Errorf("by=: %w", err)
			}
		}
		p.space()
		if p.done() || p.peek() == ',' {
			return h, nil
		}
		if p.peek() != ';' {
			return hop{}, fmt.Errorf("junk after %s=", name)
		}
		p.i++
	}
}

// value reads a token or a quoted string (with its quoted pairs undone).
func (p *forwardedParser) value() (string, error) {
	if p.done() {
		return "", fmt.Errorf("no value")
	}
	if p.peek() != '"' {
		if v := p.token(); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("want a token or a quoted string")
	}
	p.i++
	var b strings.Builder
	for !p.done() {
		c := p.peek()
		p.i++
		switch {
		case c == '"':
			return b.String(), nil
		case c == '\\':
			if p.done() {
				return "", fmt.Errorf("unfinished quoted pair")
			}
			c = p.peek()
			p.i++
		case c < 0x20 && c != '\t' || c == 0x7f:
			return "", fmt.Errorf("control character in a quoted string")
		}
		b.WriteByte(c)
	}
	return "", fmt.Errorf("unclosed quote")
}

// canonical is peer's text: host itself when host is already written so (the
// usual case), without making a string per request.
func canonical(host string, peer netip.Addr) string {
	var buf [64]byte
	if string(peer.AppendTo(buf[:0])) == host {
		return host
	}
	return peer.String()
}
