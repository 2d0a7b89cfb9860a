package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

func fp(b byte) string {
	parts := make([]string, 32)
	for i := range parts {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

// threeNodes is what a 3-node cluster says of itself when asked through pve2.
func threeNodes() ([]pve.ClusterStatusEntry, []pve.Node) {
	return []pve.ClusterStatusEntry{
			{Type: "cluster", Name: "prod", Quorate: true, Nodes: 3},
			{Type: "node", Name: "pve3", IP: "10.0.0.3", Online: false},
			{Type: "node", Name: "pve2", IP: "10.0.0.2", Online: true, Local: true},
			{Type: "node", Name: "pve1", IP: "10.0.0.1", Online: true},
		}, []pve.Node{
			{Node: "pve1", Status: "online", SSLFingerprint: strings.ToLower(fp(1))},
			{Node: "pve2", Status: "online", SSLFingerprint: fp(2)},
			{Node: "pve3", Status: "offline", SSLFingerprint: fp(3)},
		}
}

func TestLearnFingerprintMode(t *testing.T) {
	t.Parallel()
	status, nodes := threeNodes()
	tgt := connectTarget{endpoints: []string{"https://10.0.0.2:8006"}, trust: trust{mode: TrustFingerprint, fingerprint: fp(2)}}
	got := learn(tgt, 0, fp(2), status, nodes, slog.New(slog.DiscardHandler))
	want := []store.Endpoint{
		{URL: "https://10.0.0.2:8006", Node: "pve2", Fingerprint: fp(2)},
		{URL: "https://10.0.0.1:8006", Node: "pve1", Fingerprint: fp(1)},
		{URL: "https://10.0.0.3:8006", Node: "pve3", Fingerprint: fp(3)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("learned\n%v\nwant\n%v", got, want)
	}
}

func TestLearnKeepsGivenEndpointsFirst(t *testing.T) {
	t.Parallel()
	status, nodes := threeNodes()
	// The admin gave a DNS name for pve3 (matched by node name) and a load balancer
	// (matched by nothing), and vmgate got through the second one.
	tgt := connectTarget{
		endpoints: []string{"https://pve3.example.com:8006", "https://10.0.0.2:8006", "https://lb.example.com"},
		trust:     trust{mode: TrustFingerprint, fingerprint: fp(2)},
	}
	got := learn(tgt, 1, fp(2), status, nodes, slog.New(slog.DiscardHandler))
	want := []store.Endpoint{
		{URL: "https://pve3.example.com:8006", Node: "pve3", Fingerprint: fp(3)},
		{URL: "https://10.0.0.2:8006", Node: "pve2", Fingerprint: fp(2)},
		{URL: "https://lb.example.com", Fingerprint: fp(2)},
		{URL: "https://10.0.0.1:8006", Node: "pve1", Fingerprint: fp(1)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("learned\n%v\nwant\n%v", got, want)
	}
}

func TestLearnCAModeStoresNoPins(t *testing.T) {
	t.Parallel()
	status, nodes := threeNodes()
	nodes[0].SSLFingerprint = "" // no fingerprint needed with a CA
	tgt := connectTarget{endpoints: []string{"https://[fd00::2]"}, trust: trust{mode: TrustCA, caCert: "x"}}
	status[2].IP = "fd00::2"
	got := learn(tgt, 0, "", status, nodes, slog.New(slog.DiscardHandler))
	want := []store.Endpoint{
		{URL: "https://[fd00::2]", Node: "pve2"},
		{URL: "https://10.0.0.1", Node: "pve1"},
		{URL: "https://10.0.0.3", Node: "pve3"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("learned\n%v\nwant\n%v", got, want)
	}
}

func TestLearnSkipsNodesItCannotPin(t *testing.T) {
	t.Parallel()
	status, nodes := threeNodes()
	nodes[0].SSLFingerprint = "garbage" // pve1: nothing to pin
	status[1].IP = ""                   // pve3: nowhere to connect
	tgt := connectTarget{endpoints: []string{"https://10.0.0.2:8006"}, trust: trust{mode: TrustFingerprint, fingerprint: fp(2)}}
	got := learn(tgt, 0, fp(2), status, nodes, slog.New(slog.DiscardHandler))
	want := []store.Endpoint{{URL: "https://10.0.0.2:8006", Node: "pve2", Fingerprint: fp(2)}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("learned %v, want %v", got, want)
	}
}

// farSideBody is what something that is not PVE may answer a registration with;
// farSideBits are pieces of it no message may repeat.
const farSideBody = `<html><head><title>Login</title></head><body><script>location="https://evil.example/"</script>` +
	`Your session expired: log in again at https://evil.example/pve</body></html>`

var farSideBits = []string{"<html", "<script", "evil.example", "session expired"}

func TestConnectErrorNamesTheProblem(t *testing.T) {
	t.Parallel()
	const ep = "https://10.0.0.1:8006"
	cases := []struct {
		name   string
		err    error
		kind   errs.Kind
		reason string
		says   []string
	}{
		{"tls", &pve.UnavailableError{Attempts: []pve.AttemptError{{Endpoint: ep, Err: &pve.TLSError{Endpoint: ep, Expected: fp(1), Presented: fp(2)}}}},
			errs.Invalid, ReasonTLSMismatch, []string{ep, fp(1), fp(2)}},
		{"refused", &pve.UnavailableError{Attempts: []pve.AttemptError{{Endpoint: ep, Err: errors.New("dial tcp 10.0.0.1:8006: connect: connection refused")}}},
			errs.Invalid, ReasonUnreachable, []string{ep, "connection refused"}},
		{"401", &pve.Error{StatusCode: 401, Reason: "No ticket"}, errs.Invalid, ReasonTokenRejected, []string{ep, "No ticket", "vmgate@pve!gw"}},
		{"403", &pve.Error{StatusCode: 403, Message: "Permission check failed (/, Sys.Audit)"}, errs.Invalid, ReasonPermissionMissing, []string{"Sys.Audit"}},
		{"not pve", &pve.Error{StatusCode: 501, Message: "no such uri"}, errs.Invalid, ReasonUnreachable, []string{"does not answer like a PVE API"}},
		{"500", &pve.Error{StatusCode: 500, Message: "cluster not ready - no quorum?"}, errs.Upstream, "upstream_error", []string{"no quorum"}},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), errs.Timeout, "", nil},
		// Only PVE's own JSON message is quoted; a body that is not (a proxy's page)
		// is named, not repeated, and the message says what to check.
		{"html 502", &pve.Error{StatusCode: 502, Reason: "Bad Gateway", Message: farSideBody, Plain: true}, errs.Upstream, "upstream_error",
			[]string{ep, "502 Bad Gateway", "not PVE's JSON", "port 8006", "proxy"}},
		{"html 404", &pve.Error{StatusCode: 404, Reason: "Not Found", Message: farSideBody, Plain: true}, errs.Invalid, ReasonUnreachable,
			[]string{"404 Not Found", "not PVE's JSON", "/api2/json"}},
		{"json 500 hint", &pve.Error{StatusCode: 500, Message: "cluster not ready - no quorum?"}, errs.Upstream, "upstream_error",
			[]string{"no quorum", "pvecm status", "pveproxy"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := connectError(ep, "vmgate@pve!gw", c.err)
			if e.Kind != c.kind || (c.reason != "" && e.Reason != c.reason) {
				t.Fatalf("got %v/%q, want %v/%q", e.Kind, e.Reason, c.kind, c.reason)
			}
			for _, bit := range farSideBits {
				if strings.Contains(e.Message, bit) {
					t.Errorf("message %q repeats the far side's body (%q)", e.Message, bit)
				}
			}
			for _, s := range c.says {
				if !strings.Contains(e.Message, s) {
					t.Errorf("message %q does not say %q", e.Message, s)
				}
			}
		})
	}
}

func TestWorstFailurePrefersTheTellingOne(t *testing.T) {
	t.Parallel()
	unreachable := connectError("https://a", "u@pve!t", &pve.UnavailableError{Attempts: []pve.AttemptError{{Endpoint: "https://a", Err: errors.New("no route to host")}}})
	rejected := connectError("https://b", "u@pve!t", &pve.Error{StatusCode: 401, Reason: "Authentication failed!"})
	err := worstFailure([]*errs.Error{unreachable, rejected})
	e, _ := errs.As(err)
	if e.Reason != ReasonTokenRejected || !strings.Contains(e.Message, "no route to host") {
		t.Fatalf("got %q: %s", e.Reason, e.Message)
	}
	if rejected.Message == e.Message {
		t.Fatal("worstFailure changed its input")
	}
}

func TestUpstreamError(t *testing.T) {
	t.Parallel()
	const ep = "https://10.0.0.1:8006"
	offline := &pve.NodeOfflineError{Node: "pve2", Err: &pve.Error{StatusCode: 595, Reason: "No route to host"}}
	cases := []struct {
		name   string
		err    error
		kind   errs.Kind
		reason string
		says   string
	}{
		{"unavailable", &pve.UnavailableError{Attempts: []pve.AttemptError{{Endpoint: ep, Err: errors.New("refused")}, {Endpoint: ep, Err: &pve.Error{StatusCode: 595}}}},
			errs.Unavailable, "", "no endpoint"},
		{"timeout", fmt.Errorf("pve: GET /nodes: %w", pve.ErrTimeout), errs.Timeout, "", "in time"},
		{"node offline", offline, errs.Conflict, "node_offline", "node pve2 is offline"},
		{"not found", &pve.Error{StatusCode: 500, Message: "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist"},
			errs.NotFound, "not_found", "does not exist"},
		{"token", &pve.Error{StatusCode: 401, Reason: "Authentication failed!"}, errs.Upstream, ReasonTokenRejected, "Authentication failed!"},
		{"tls", &pve.UnavailableError{Attempts: []pve.AttemptError{{Endpoint: ep, Err: &pve.TLSError{Endpoint: ep, Expected: fp(1), Presented: fp(9)}}}},
			errs.Upstream, ReasonTLSMismatch, fp(9)},
		{"other", &pve.Error{StatusCode: 500, Message: "VM 100 not running"}, errs.Upstream, "upstream_error", "VM 100 not running"},
		{"param", &pve.Error{StatusCode: 400, Message: "Parameter verification failed.", Errors: map[string]string{"target": "target is local node."}},
			errs.Upstream, "upstream_error", "Parameter verification failed."},
		{"bad answer", fmt.Errorf("x: %w", pve.ErrBadResponse), errs.Upstream, "", "cannot read"},
		{"invalid", fmt.Errorf("pve: %w: node %q is not a node name", pve.ErrInvalidArgument, "a/b"), errs.Invalid, "", "not a node name"},
		{"ours", errs.R(errs.Conflict, "vm_running", "VM 100 is already running"), errs.Conflict, "vm_running", "already running"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, ok := errs.As(UpstreamError(c.err))
			if !ok {
				t.Fatal("not an *errs.Error")
			}
			if e.Kind != c.kind || (c.reason != "" && e.Reason != c.reason) || !strings.Contains(e.Message, c.says) {
				t.Fatalf("got %v/%q %q; want %v/%q saying %q", e.Kind, e.Reason, e.Message, c.kind, c.reason, c.says)
			}
		})
	}
	if UpstreamError(nil) != nil {
		t.Fatal("nil did not stay nil")
	}
}
