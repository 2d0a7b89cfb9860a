package pve

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrInvalidArgument is wrapped by every error about a value the caller passed
// (a node name, vmid, UPID or option PVE would not accept). No request is sent.
var ErrInvalidArgument = errors.New("invalid argument")

// Limits of PVE's formats (pve-common JSONSchema: pve-node, pve-vmid).
const (
	MinVMID        = 100
	MaxVMID        = 999999999
	maxNodeNameLen = 63
)

// ValidNode reports whether s is a PVE node name: hostname syntax
// ^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$, at most 63 characters.
func ValidNode(s string) bool { return len(s) <= maxNodeNameLen && nodeSyntax(s) }

// nodeSyntax is the pve-node pattern without the length limit (the UPID
// grammar has none).
func nodeSyntax(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// ValidVMID reports whether id is in PVE's vmid range 100..999999999.
func ValidVMID(id int) bool { return id >= MinVMID && id <= MaxVMID }

func checkNode(what, node string) error {
	if !ValidNode(node) {
		return fmt.Errorf("%w: %s %q is not a node name", ErrInvalidArgument, what, truncate(node, 80))
	}
	return nil
}

func checkVMID(vmid int) error {
	if !ValidVMID(vmid) {
		return fmt.Errorf("%w: vmid %d is outside %d..%d", ErrInvalidArgument, vmid, MinVMID, MaxVMID)
	}
	return nil
}

// apiPath is a validated, escaped path below /api2/json. It is only ever made
// by the constructors below, which validate every value they put in it, so a
// request can only reach PVE at a path of one of these shapes.
type apiPath struct {
	escaped string // e.g. /nodes/pve1/qemu/100/status/start
	node    string // the node PVE proxies the request to; empty if served locally
}

func (p apiPath) String() string { return p.escaped }

// Fixed, value-free paths.
var (
	pathVersion          = apiPath{escaped: "/version"}
	pathClusterStatus    = apiPath{escaped: "/cluster/status"}
	pathClusterResources = apiPath{escaped: "/cluster/resources"}
	pathClusterTasks     = apiPath{escaped: "/cluster/tasks"}
	pathNodes            = apiPath{escaped: "/nodes"}
)

// nodeTasksPath builds /nodes/{node}/tasks.
func nodeTasksPath(node string) (apiPath, error) {
	if err := checkNode("node", node); err != nil {
		return apiPath{}, err
	}
	return apiPath{escaped: "/nodes/" + url.PathEscape(node) + "/tasks", node: node}, nil
}

// taskPath builds /nodes/{upid.Node}/tasks/{upid}[/sub] with sub "", "status"
// or "log". The UPID is re-validated here (it may have been built field by
// field), and a task is always asked for at its own node: only that node has
// its log.
func taskPath(upid UPID, sub string) (apiPath, error) {
	text := upid.String()
	parsed, err := ParseUPID(text)
	if err != nil {
		return apiPath{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if err := checkNode("task node", parsed.Node); err != nil {
		return apiPath{}, err
	}
	switch sub {
	case "", "status", "log":
	default:
		return apiPath{}, fmt.Errorf("%w: unknown task sub-path %q", ErrInvalidArgument, sub)
	}
	p := "/nodes/" + url.PathEscape(parsed.Node) + "/tasks/" + url.PathEscape(text)
	if sub != "" {
		p += "/" + sub
	}
	return apiPath{escaped: p, node: parsed.Node}, nil
}

// checkEscapedPath is the last line of defence before a URL is built: the
// escaped path must have only plain segments — no empty ones, no "." or "..",
// nothing that decodes to a slash, NUL or line break.
func checkEscapedPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q does not start with /", p)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return fmt.Errorf("path segment %q: %w", seg, err)
		}
		if seg == "" || dec == "." || dec == ".." || strings.ContainsAny(dec, "/\x00\r\n") {
			return fmt.Errorf("path segment %q is not allowed", seg)
		}
		if url.PathEscape(dec) != seg {
			return fmt.Errorf("path segment %q is not canonically escaped", seg)
		}
	}
	return nil
}
