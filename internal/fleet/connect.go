package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Reasons of a failed registration or reconnection (docs/decisions/0003). They are
// 400s: the admin's request names something that does not work, and repeating it
// unchanged will not help.
const (
	ReasonUnreachable       = "cluster_unreachable" // no given endpoint answers like PVE
	ReasonTLSMismatch       = "tls_mismatch"        // the certificate is not the pinned one / not signed by the CA
	ReasonTokenRejected     = "token_rejected"      // PVE answered 401 to the token
	ReasonPermissionMissing = "permission_missing"  // PVE answered 403: the token lacks a privilege
)

// connectTarget is what connect needs to reach a cluster.
type connectTarget struct {
	endpoints []string // normalised, in the admin's order
	tokenID   string
	secret    string
	trust     trust
	// pins are fingerprints already known per endpoint URL (on update), used for a
	// given endpoint when trust.fingerprint is empty.
	pins map[string]string
}

// connect reaches the cluster through the first given endpoint that answers, checks
// the token (/version, /cluster/status) and learns every node's address and
// certificate fingerprint (/cluster/status ip, /nodes ssl_fingerprint). It returns the
// endpoints to store: the given ones first, in order, then the learned ones by node
// name, and the PVE version the cluster answered with. Learned fingerprints are
// trusted because they arrive over the connection that was just verified against
// the admin's pin or CA.
func (s *Service) connect(ctx context.Context, t connectTarget) ([]store.Endpoint, pve.Version, error) {
	var failures []*errs.Error
	for i, ep := range t.endpoints {
		pin := t.pin(ep)
		if t.trust.mode == TrustFingerprint && pin == "" {
			failures = append(failures, errs.E(errs.Invalid,
				"no certificate fingerprint is known for %s; give tlsFingerprint", ep))
			continue
		}
		version, status, nodes, err := s.probe(ctx, t, ep, pin)
		if err != nil {
			e := connectError(ep, t.tokenID, err)
			if e.Kind != errs.Invalid {
				return nil, pve.Version{}, e // PVE answered, but strangely: say so rather than try on
			}
			failures = append(failures, e)
			continue
		}
		return learn(t, i, pin, status, nodes, s.log), version, nil
	}
	return nil, pve.Version{}, worstFailure(failures)
}

func (t connectTarget) pin(ep string) string {
	if t.trust.mode != TrustFingerprint {
		return ""
	}
	if t.trust.fingerprint != "" {
		return t.trust.fingerprint
	}
	return t.pins[ep]
}

// probe talks to one endpoint alone (no failover), so that its failure names it.
func (s *Service) probe(ctx context.Context, t connectTarget, ep, pin string) (pve.Version, []pve.ClusterStatusEntry, []pve.Node, error) {
	cl, err := pve.New(pve.Config{
		Endpoints:          []pve.Endpoint{{URL: ep, Fingerprint: pin}},
		TokenID:            t.tokenID,
		TokenSecret:        t.secret,
		CACertPEM:          t.trust.caCert,
		InsecureSkipVerify: t.trust.mode == TrustInsecure,
		Timeout:            s.timeout,
		Logger:             s.log.With(slog.String("probe", ep)),
	})
	if err != nil {
		return pve.Version{}, nil, nil, errs.Wrap(errs.Invalid, err, "cannot use %s: %s", ep, clientConfigText(err))
	}
	defer cl.Close()
	// VersionAt makes one attempt, without retries: a wrong address, certificate or
	// token is reported at once.
	version, err := cl.VersionAt(ctx, ep)
	if err != nil {
		return pve.Version{}, nil, nil, err
	}
	status, err := cl.ClusterStatus(ctx)
	if err != nil {
		return pve.Version{}, nil, nil, err
	}
	nodes, err := cl.Nodes(ctx)
	if err != nil {
		return pve.Version{}, nil, nil, err
	}
	return version, status, nodes, nil
}

// learn builds the endpoint list from what the cluster told about itself through
// t.endpoints[via], which answered with pin (fingerprint mode) verified.
func learn(t connectTarget, via int, pin string, status []pve.ClusterStatusEntry, nodes []pve.Node, log *slog.Logger) []store.Endpoint {
	fps := map[string]string{}
	for _, n := range nodes {
		if fp, err := pve.NormalizeFingerprint(n.SSLFingerprint); err == nil {
			fps[n.Node] = fp
		}
	}
	var members []pve.ClusterStatusEntry
	local := ""
	for _, e := range status {
		if e.Type == "node" && pve.ValidNode(e.Name) {
			members = append(members, e)
			if e.Local {
				local = e.Name
			}
		}
	}
	slices.SortFunc(members, func(a, b pve.ClusterStatusEntry) int { return cmp.Compare(a.Name, b.Name) })

	fingerprintMode := t.trust.mode == TrustFingerprint
	out := make([]store.Endpoint, 0, len(t.endpoints)+len(members))
	covered := map[string]bool{} // node names with an endpoint
	seen := map[string]bool{}    // URLs
	for i, ep := range t.endpoints {
		e := store.Endpoint{URL: ep}
		switch {
		case i == via:
			// What was verified is kept, whatever the node says of itself: a given
			// endpoint may be a proxy in front of the node.
			e.Node, e.Fingerprint = local, pin
		default:
			if m, ok := matchMember(ep, members); ok {
				e.Node = m.Name
			}
			if fingerprintMode {
				if fp := fps[e.Node]; e.Node != "" && fp != "" {
					e.Fingerprint = fp
				} else {
					// Not a node we know by address (a load balancer, a name we cannot
					// match): it must present the certificate the admin pinned.
					e.Fingerprint = t.pin(ep)
				}
			}
		}
		if e.Node != "" {
			covered[e.Node] = true
		}
		seen[ep] = true
		out = append(out, e)
	}
	scheme, port := splitEndpoint(t.endpoints[via])
	for _, m := range members {
		if covered[m.Name] {
			continue
		}
		ip := net.ParseIP(m.IP)
		if ip == nil {
			log.Warn("cluster node has no usable address; not a failover endpoint", slog.String("node", m.Name), slog.String("ip", m.IP))
			continue
		}
		e := store.Endpoint{URL: joinEndpoint(scheme, ip.String(), port), Node: m.Name}
		if fingerprintMode {
			if e.Fingerprint = fps[m.Name]; e.Fingerprint == "" {
				log.Warn("cluster node reports no certificate fingerprint; not a failover endpoint", slog.String("node", m.Name))
				continue
			}
		}
		if seen[e.URL] {
			continue
		}
		seen[e.URL] = true
		covered[m.Name] = true
		out = append(out, e)
	}
	return out
}

// matchMember finds the node a given endpoint points at: by IP, by node name, or by
// a fully qualified name that starts with the node name.
func matchMember(ep string, members []pve.ClusterStatusEntry) (pve.ClusterStatusEntry, bool) {
	u, err := url.Parse(ep)
	if err != nil {
		return pve.ClusterStatusEntry{}, false
	}
	host := u.Hostname()
	for _, m := range members {
		if ip := net.ParseIP(host); ip != nil && ip.Equal(net.ParseIP(m.IP)) {
			return m, true
		}
		if strings.EqualFold(host, m.Name) || strings.HasPrefix(strings.ToLower(host), strings.ToLower(m.Name)+".") {
			return m, true
		}
	}
	return pve.ClusterStatusEntry{}, false
}

func splitEndpoint(ep string) (scheme, port string) {
	u, err := url.Parse(ep)
	if err != nil {
		return "https", ""
	}
	return u.Scheme, u.Port()
}

func joinEndpoint(scheme, host, port string) string {
	if port == "" {
		if strings.Contains(host, ":") {
			return scheme + "://[" + host + "]"
		}
		return scheme + "://" + host
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// connectError says what went wrong when vmgate tried a cluster through ep. Kind
// Invalid means "the request names something that does not work" (the admin must
// change it); Upstream means PVE answered in a way vmgate did not expect.
func connectError(ep, tokenID string, err error) *errs.Error {
	if e, ok := errs.As(err); ok {
		return e
	}
	at := map[string]any{"endpoint": ep}
	var tlsErr *pve.TLSError
	var pe *pve.Error
	switch {
	case errors.Is(err, context.Canceled):
		return errs.Wrap(errs.Timeout, err, "the request was cancelled before %s answered", ep)
	case errors.As(err, &tlsErr):
		e := &errs.Error{Kind: errs.Invalid, Reason: ReasonTLSMismatch, Err: err, Details: at}
		at["presented"] = tlsErr.Presented
		if tlsErr.Expected != "" {
			at["expected"] = tlsErr.Expected
			e.Message = "the certificate of " + ep + " has SHA-256 fingerprint " + orNone(tlsErr.Presented) +
				", but tlsFingerprint is " + tlsErr.Expected + "; check tlsFingerprint (PVE shows it under the node's System → Certificates)"
		} else {
			e.Message = "the certificate of " + ep + " (SHA-256 fingerprint " + orNone(tlsErr.Presented) + ") does not verify against caCert: " +
				clip(fmt.Sprint(tlsErr.Err), 200)
		}
		return e
	case errors.Is(err, pve.ErrTimeout):
		return &errs.Error{Kind: errs.Invalid, Reason: ReasonUnreachable, Err: err, Details: at,
			Message: "PVE at " + ep + " did not answer in time; check the address, the port (PVE listens on 8006) and the network between vmgate and the node"}
	case errors.Is(err, pve.ErrUnavailable):
		return &errs.Error{Kind: errs.Invalid, Reason: ReasonUnreachable, Err: err, Details: at,
			Message: "cannot reach PVE at " + ep + ": " + clip(attemptText(err), 200) + "; check the address, the port (PVE listens on 8006) and the network between vmgate and the node"}
	case errors.As(err, &pe):
		text := pveSaid(pe)
		switch {
		case pe.StatusCode == 401:
			return &errs.Error{Kind: errs.Invalid, Reason: ReasonTokenRejected, Err: err, Details: at,
				Message: "PVE at " + ep + " rejected the API token " + quoteSafe(tokenID) + " (401 " + text + "); check tokenId and tokenSecret, and that the token and its user are enabled and not expired"}
		case pe.StatusCode == 403:
			return &errs.Error{Kind: errs.Invalid, Reason: ReasonPermissionMissing, Err: err, Details: at,
				Message: "the API token " + quoteSafe(tokenID) + " lacks a permission: PVE at " + ep + " said \"" + text + "\"; give the token (with privilege separation, the token itself) at least the PVEAuditor role on / and VM.PowerMgmt and VM.Migrate on /vms"}
		case pe.StatusCode == 404 || pe.StatusCode == 501:
			return &errs.Error{Kind: errs.Invalid, Reason: ReasonUnreachable, Err: err, Details: at,
				Message: ep + " does not answer like a PVE API (" + itoa(pe.StatusCode) + " " + text + notPVEBody(pe) +
					"); give a node's address and port, e.g. https://10.0.0.1:8006, and check that a proxy in front passes /api2/json through"}
		case pe.Plain && pe.Message != "":
			return &errs.Error{Kind: errs.Upstream, Reason: "upstream_error", Err: err, Details: at,
				Message: ep + " answered " + itoa(pe.StatusCode) + " " + text + notPVEBody(pe) +
					"; check that the address is a PVE node's (port 8006) and, if a proxy is in front, that it reaches the node"}
		default:
			return &errs.Error{Kind: errs.Upstream, Reason: "upstream_error", Err: err, Details: at,
				Message: "PVE at " + ep + " answered " + itoa(pe.StatusCode) + " " + text +
					"; check the cluster's health on that node (quorum: pvecm status) and PVE's API services (systemctl status pveproxy pvedaemon), then try again"}
		}
	case errors.Is(err, pve.ErrBadResponse):
		return &errs.Error{Kind: errs.Invalid, Reason: ReasonUnreachable, Err: err, Details: at,
			Message: ep + " does not answer like a PVE API; give a node's address and port, e.g. https://10.0.0.1:8006, and check that a proxy in front passes /api2/json through"}
	default:
		return &errs.Error{Kind: errs.Invalid, Reason: ReasonUnreachable, Err: err, Details: at,
			Message: "cannot reach PVE at " + ep + ": " + clip(err.Error(), 200)}
	}
}

// attemptText is why the attempts of an unavailable request failed, without the
// client's prefix (the endpoint is named by the caller).
func attemptText(err error) string {
	var ue *pve.UnavailableError
	if !errors.As(err, &ue) || len(ue.Attempts) == 0 {
		return err.Error()
	}
	parts := make([]string, 0, len(ue.Attempts))
	for _, a := range ue.Attempts {
		if t := a.Err.Error(); !slices.Contains(parts, t) {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "; ")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// worstFailure picks the failure to report when no endpoint worked: the one that
// tells the most (a rejected token beats a refused connection), keeping the other
// endpoints' troubles in the message.
func worstFailure(fs []*errs.Error) error {
	if len(fs) == 0 {
		return invalid("no endpoint to connect to")
	}
	rank := map[string]int{ReasonTokenRejected: 4, ReasonPermissionMissing: 3, ReasonTLSMismatch: 2, "invalid_request": 1}
	best := fs[0]
	for _, f := range fs[1:] {
		if rank[f.ReasonOrDefault()] > rank[best.ReasonOrDefault()] {
			best = f
		}
	}
	if len(fs) == 1 {
		return best
	}
	e := *best
	var others []string
	for _, f := range fs {
		if f != best {
			others = append(others, f.Message)
		}
	}
	e.Message = best.Message + " (also: " + strings.Join(others, "; ") + ")"
	return &e
}

// pveSaid is what a registration error quotes of an answer: PVE's own words —
// the message of its JSON envelope, else the status line's reason phrase —
// never a body that was not PVE's JSON. The far side of a registration is
// whatever the admin typed: a proxy's or another server's page could say
// anything (a script, a link, a phishing text), and vmgate would be the one
// repeating it to an admin. The body stays in the log (Err).
func pveSaid(pe *pve.Error) string {
	t := pe.Message
	if pe.Plain || t == "" {
		t = pe.Reason
	}
	t = strings.TrimSpace(t)
	if i := strings.IndexByte(t, '\n'); i >= 0 {
		t = t[:i]
	}
	return clip(t, 200)
}

// notPVEBody says that the answer had a body that is not PVE's, without quoting it.
func notPVEBody(pe *pve.Error) string {
	if pe.Plain && pe.Message != "" {
		return ", with a body that is not PVE's JSON"
	}
	return ""
}

// pveText is PVE's own words for an error: its message, else its reason phrase.
func pveText(pe *pve.Error) string {
	t := strings.TrimSpace(pe.Text())
	if i := strings.IndexByte(t, '\n'); i >= 0 {
		t = t[:i]
	}
	return clip(t, 300)
}
