package webui

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// A guest is a QEMU VM or an LXC container (issue 18, docs/history.md). Both have
// a page with the same actions at their own address, /vms/… and /cts/…, served
// by the same handlers: a kind is a row of guestKinds, and the use cases (vmops)
// apply the kind's rules, as the API's guestKindRoutes do.

// guestKind is a kind of guest as the UI serves it.
type guestKind struct {
	kind    vmops.GuestKind
	segment string // the first segment of its pages' paths
	// suspend: suspend and resume are offered. Not for containers: PVE marks a
	// container's suspend experimental (it needs CRIU), and vmgate does not offer it.
	suspend bool
}

var guestKinds = []guestKind{
	{vmops.GuestVM, "vms", true},
	{vmops.GuestCT, "cts", false},
}

// kindOf is the row of guestKinds of kind ("" is a VM).
func kindOf(kind vmops.GuestKind) guestKind {
	if kind == vmops.GuestCT {
		return guestKinds[1]
	}
	return guestKinds[0]
}

// guestRoute is the pattern of a guest's page of the kind, and the prefix of its actions.
func (k guestKind) route() string { return "/" + k.segment + "/{clusterId}/{node}/{vmid}" }

// guestURL is the UI page of a guest of kind, PVE's name of it ("qemu", "lxc";
// "" is a VM, and so is a kind the UI does not know: a VM's page sends a
// container's vmid on to the container's page).
func guestURL(kind string, clusterID int64, node string, vmid int64) string {
	return "/" + kindOf(vmops.GuestKind(kind)).segment + "/" + strconv.FormatInt(clusterID, 10) + "/" +
		url.PathEscape(node) + "/" + strconv.FormatInt(vmid, 10)
}

// refURL is the UI page of the guest ref names.
func refURL(ref vmops.GuestRef) string {
	return guestURL(string(ref.Kind), ref.ClusterID, ref.Node, ref.VMID)
}

// noun is "VM" or "CT".
func noun(ref vmops.GuestRef) string { return ref.Kind.Noun() }

// guestName is "VM 100" or "CT 200".
func guestName(ref vmops.GuestRef) string { return noun(ref) + " " + itoa(ref.VMID) }

// pathGuest reads and validates {clusterId}/{node}/{vmid} of a guest of kind
// (docs/security.md item 20) before anything else happens.
func pathGuest(r *http.Request, kind vmops.GuestKind) (vmops.GuestRef, error) {
	id, err := strconv.ParseInt(r.PathValue("clusterId"), 10, 64)
	if err != nil || id < 1 {
		return vmops.GuestRef{}, errGuestPath(kind, "cluster")
	}
	node := r.PathValue("node")
	if !validNode(node) {
		return vmops.GuestRef{}, errGuestPath(kind, "node")
	}
	vmid, err := strconv.ParseInt(r.PathValue("vmid"), 10, 64)
	if err != nil || vmid < vmops.MinVMID || vmid > vmops.MaxVMID {
		return vmops.GuestRef{}, errGuestPath(kind, "vmid")
	}
	return vmops.GuestRef{ClusterID: id, Node: node, Kind: kind, VMID: vmid}, nil
}

// errGuestPath is the answer to a guest's path that cannot name one.
func errGuestPath(kind vmops.GuestKind, what string) error {
	return errs.E(errs.NotFound, "there is no %s at this address (%s)", kind.Noun(), what)
}

// movedTo says where the guest of a NotFound read is, from its details: on
// another node (node), or a guest of the other kind (kind and node); "" when
// the error says neither.
func movedTo(ref vmops.GuestRef, err error) string {
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.NotFound {
		return ""
	}
	node, _ := e.Details["node"].(string)
	if node == "" || !validNode(node) {
		return ""
	}
	kind := ref.Kind
	if k, _ := e.Details["kind"].(string); k != "" {
		if !vmops.GuestKind(k).Valid() {
			return ""
		}
		kind = vmops.GuestKind(k)
	}
	return guestURL(string(kind), ref.ClusterID, node, ref.VMID)
}
