package notify

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// DefaultDenyCIDRs are the ranges vmgate never sends to unless the operator
// says otherwise (--notify-deny-cidr): link-local (where clouds answer with
// instance credentials) and the metadata addresses outside it, and the
// unspecified addresses (which reach this host).
var DefaultDenyCIDRs = []string{
	"169.254.0.0/16",     // IPv4 link-local, cloud metadata (169.254.169.254)
	"fe80::/10",          // IPv6 link-local
	"fd00:ec2::254/128",  // AWS metadata over IPv6
	"100.100.100.200/32", // Alibaba Cloud metadata
	"168.63.129.16/32",   // Azure's host (wireserver)
	"0.0.0.0/8",
	"::/128",
}

// ParseCIDRs parses CIDRs or single addresses.
func ParseCIDRs(ss []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q is neither an address nor a CIDR", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// guardedDialer dials only addresses outside its deny list: it resolves the
// host itself, checks every address, and dials the checked address, never the
// name again (a second resolution could answer differently: DNS rebinding).
type guardedDialer struct {
	deny     []netip.Prefix
	resolver *net.Resolver
	dialer   net.Dialer
}

func (g *guardedDialer) denied(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range g.deny {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// DialContext implements the transports' dial.
func (g *guardedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		r := g.resolver
		if r == nil {
			r = net.DefaultResolver
		}
		if addrs, err = r.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
	}
	var lastErr error
	for _, a := range addrs {
		if g.denied(a) {
			lastErr = permanent(fmt.Errorf("%s is in a range vmgate does not send to (--notify-deny-cidr)", a))
			continue
		}
		conn, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("%s has no address", host)
	}
	return nil, lastErr
}

// permanentError is a failure that sending again cannot change.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

func permanent(err error) error { return permanentError{err} }
