package httpapi

import (
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The reads of guests of either kind (docs/design.md §3.2a, §3.4): a guest's
// status under its kind's path, a cluster's guests of both kinds, and the
// guests of every cluster the caller may see.

// guestSegment is the API's path segment of a kind's guests ("vm", "lxc").
func guestSegment(kind vmops.GuestKind) string {
	for _, k := range guestKindRoutes {
		if k.kind == kind || kind == "" && k.kind == vmops.GuestVM {
			return k.segment
		}
	}
	return ""
}

// guestStatus answers GET /api/v1/pve/{vm|lxc}/{clusterId}/{node}/{vmid}: the
// guest's status/current, read from PVE (viewer grant).
func (s *Server) guestStatus(kind vmops.GuestKind) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		g, err := pathGuest(r, kind)
		if err != nil {
			return err
		}
		if err := checkQuery(r); err != nil {
			return err
		}
		st, err := s.fleet.GuestStatus(r.Context(), actor(r), g.ClusterID, string(g.Kind), g.Node, g.VMID)
		if err != nil {
			return withRightPath(r, g, err)
		}
		if kind == vmops.GuestCT {
			writeEncoded(w, http.StatusOK, "success", (*ctStatusAnswer)(&st), nil)
		} else {
			writeEncoded(w, http.StatusOK, "success", (*vmStatusAnswer)(&st), nil)
		}
		return nil
	}
}

// notOffered answers an action vmgate does not offer for a kind of guest, once
// the request is valid (path, no query, no body) and before anything else:
// nothing of the cluster is looked at (docs/decisions/0090).
func notOffered(kind vmops.GuestKind, action, why string) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, err := pathGuest(r, kind); err != nil {
			return err
		}
		if err := checkQuery(r); err != nil {
			return err
		}
		if err := requireNoBody(w, r); err != nil {
			return err
		}
		return errs.R(errs.Invalid, errs.ReasonNotOffered, "vmgate does not offer %s for a %s: %s", action, kind.Noun(), why)
	}
}

// withRightPath adds to a guest's 404 that names where the vmid is (a node, and
// a kind when it is a guest of the other kind: fleet.NotOnNodeOf) the API path
// of that guest for the same request, as "path": the caller used the wrong
// node or the wrong kind's route.
func withRightPath(r *http.Request, g vmops.GuestRef, err error) error {
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.NotFound {
		return err
	}
	node, _ := e.Details["node"].(string)
	if node == "" || !vmops.ValidNode(node) {
		return err
	}
	kind := g.Kind
	if k, ok := e.Details["kind"].(string); ok {
		kind = vmops.GuestKind(k)
	}
	seg := guestSegment(kind)
	if seg == "" {
		return err
	}
	// The request's path after the guest (/start, /migrate, or nothing).
	cluster := strconv.FormatInt(g.ClusterID, 10)
	vmid := strconv.FormatInt(g.VMID, 10)
	prefix := "/api/v1/pve/" + guestSegment(g.Kind) + "/" + r.PathValue("clusterId") + "/" + r.PathValue("node") + "/" + r.PathValue("vmid")
	rest, _ := strings.CutPrefix(r.URL.Path, prefix)
	out := *e
	out.Details = make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		out.Details[k] = v
	}
	out.Details["path"] = "/api/v1/pve/" + seg + "/" + cluster + "/" + node + "/" + vmid + rest
	return &out
}

// guestQuery reads the guest lists' type filter and the VM list's filters and
// paging (readVMQuery), pool among them; the caller validates the values.
func guestQuery(r *http.Request) (kind string, q fleet.VMQuery, err error) {
	if kind, err = queryOne(r, "type"); err != nil {
		return "", q, err
	}
	if _, given := query(r)["type"]; given && kind != string(vmops.GuestVM) && kind != string(vmops.GuestCT) {
		return "", q, errs.E(errs.Invalid, "type must be %s or %s", vmops.GuestVM, vmops.GuestCT)
	}
	if q, err = readVMQuery(r); err != nil {
		return "", q, err
	}
	pool, err := queryOne(r, "pool")
	if err != nil {
		return "", q, err
	}
	if _, given := query(r)["pool"]; given && pool == "" {
		return "", q, errs.E(errs.Invalid, "pool must not be empty")
	}
	q.Pool = pool
	return kind, q, nil
}

// guestListParams are the query parameters of both guest lists.
var guestListParams = []string{"type", "node", "status", "tag", "q", "pool", "limit", "cursor"}

// listClusterGuests answers GET /api/v1/pve/clusters/{clusterId}/guests: the
// cluster's guests of both kinds (or of ?type=) by vmid, each with its type.
func (s *Server) listClusterGuests(w http.ResponseWriter, r *http.Request) error {
	var kind string
	var q fleet.VMQuery
	id, err := s.readCluster(r, func() (err error) {
		if kind, q, err = guestQuery(r); err != nil {
			return err
		}
		return q.Validate()
	}, guestListParams...)
	if err != nil {
		return err
	}
	l, err := s.fleet.GuestList(r.Context(), actor(r), id, kind, q)
	if err != nil {
		return err
	}
	writeEncoded(w, http.StatusOK, "success", guestItems{{Guests: l.VMs, All: l.All, Memo: l.Memo}},
		func(e *jsonEnc) { e.asOf(l.AsOf, l.NextCursor, true) })
	return nil
}

// listFleetGuests answers GET /api/v1/pve/guests: the guests of every cluster
// the caller holds a grant on (an admin: every cluster), by cluster and vmid,
// each with its cluster's id and name. A cluster that cannot be read is named
// in "unavailable" rather than failing the list.
func (s *Server) listFleetGuests(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, guestListParams...); err != nil {
		return err
	}
	kind, vq, err := guestQuery(r)
	if err != nil {
		return err
	}
	q := fleet.FleetQuery{VMQuery: vq, Type: kind}
	if err := q.Validate(); err != nil {
		return err
	}
	l, err := s.fleet.FleetGuests(r.Context(), actor(r), q)
	if err != nil {
		return err
	}
	writeGuestsStreamed(w, guestItems(l.Clusters), func(e *jsonEnc) {
		e.asOf(l.AsOf, l.NextCursor, true)
		e.raw(`,"unavailable":[`)
		for i, u := range l.Unavailable {
			if i > 0 {
				e.raw(",")
			}
			reason, msg := errs.Internal.String(), "internal error"
			if ue, ok := errs.As(u.Err); ok && StatusOf(ue) != http.StatusInternalServerError {
				reason, msg = ue.ReasonOrDefault(), ue.Message
			}
			e.key("clusterId", true)
			e.int(u.ClusterID)
			e.key("clusterName", false)
			e.str(u.Name)
			e.key("reason", false)
			e.str(reason)
			e.key("message", false)
			e.str(msg)
			e.raw("}")
		}
		e.raw("]")
	})
	return nil
}

// guestItems is a guest list as []guestJSON shows it, cluster by cluster: the
// parts with a ClusterID (the fleet's list) write each guest's clusterId and
// clusterName first, a part without (one cluster's list) does not. Like vmList
// it appends to a local slice grown once, and each cluster's name is escaped
// once for all its guests.
type guestItems []fleet.ClusterGuests

func (l guestItems) appendJSON(e *jsonEnc) {
	n := 0
	for i := range l {
		n += len(l[i].Guests)
	}
	e.b = slices.Grow(e.b, 2+n*300)
	l.appendItems(e, nil)
}

// streamChunk is how much of a streamed guest list is encoded before it is
// written out.
const streamChunk = 32 << 10

// appendItems writes the list, calling flush (when not nil) whenever the
// buffer holds streamChunk bytes or more. A part with a snapshot's Memo splices
// each guest's JSON, encoded once per snapshot (guestJSONOf), after its prefix.
func (l guestItems) appendItems(e *jsonEnc, flush func(*jsonEnc)) {
	b := append(e.b, '[')
	finite := true
	first := true
	var prefix []byte
	for i := range l {
		part := &l[i]
		prefix = prefix[:0]
		if part.ClusterID != 0 {
			prefix = append(prefix, `{"clusterId":`...)
			prefix = strconv.AppendInt(prefix, part.ClusterID, 10)
			prefix = append(prefix, `,"clusterName":`...)
			prefix = appendString(prefix, part.Name)
			prefix = append(prefix, `,"vmid":`...)
		} else {
			prefix = append(prefix, `{"vmid":`...)
		}
		enc, at := guestJSONOf(part), 0
		if enc != nil && len(part.Guests) > 0 {
			from := part.Guests[0].VMID
			at = sort.Search(len(part.All), func(i int) bool { return part.All[i].VMID >= from })
		}
		for j := range part.Guests {
			v := &part.Guests[j]
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, prefix...)
			// The page's guests are the snapshot's, in the same order.
			for enc != nil && at < len(part.All) && part.All[at].VMID < v.VMID {
				at++
			}
			if enc != nil && at < len(part.All) && part.All[at].VMID == v.VMID {
				b = append(b, enc.b[enc.offs[at]:enc.offs[at+1]]...)
				at++
			} else {
				var ok bool
				b, ok = appendGuest(b, v)
				finite = finite && ok
			}
			if flush != nil && len(b) >= streamChunk {
				e.b = b
				flush(e)
				b = e.b
			}
		}
	}
	e.b = append(b, ']')
	if !finite && e.err == nil {
		e.err = errNotFinite
	}
}

// appendGuest appends a guest's JSON from its vmid's value on (the part's
// prefix is written), and whether its numbers are finite.
func appendGuest(b []byte, v *fleet.VMView) ([]byte, bool) {
	b = strconv.AppendInt(b, v.VMID, 10)
	b = append(b, `,"type":`...)
	b = appendString(b, string(v.Type))
	b = append(b, `,"name":`...)
	b = appendString(b, v.Name)
	b = append(b, `,"node":`...)
	b = appendString(b, v.Node)
	b = append(b, `,"status":`...)
	b = appendString(b, v.Status)
	b = append(b, `,"lock":`...)
	b = appendString(b, v.Lock)
	b = append(b, `,"tags":[`...)
	for k, t := range v.Tags {
		if k > 0 {
			b = append(b, ',')
		}
		b = appendString(b, t)
	}
	b = append(b, `],"haState":`...)
	b = appendString(b, v.HAState)
	b = append(b, `,"pool":`...)
	b = appendString(b, v.Pool)
	b = append(b, `,"maxMem":`...)
	b = strconv.AppendInt(b, v.MaxMem, 10)
	b = append(b, `,"maxCpu":`...)
	var ok1, ok2 bool
	b, ok1 = appendFloat(b, v.MaxCPU)
	b = append(b, `,"mem":`...)
	b = strconv.AppendInt(b, v.Mem, 10)
	b = append(b, `,"cpu":`...)
	b, ok2 = appendFloat(b, v.CPU)
	b = append(b, `,"uptime":`...)
	b = strconv.AppendInt(b, v.Uptime, 10)
	return append(b, '}'), ok1 && ok2
}

// encodedGuests is every guest of a snapshot as appendGuest writes it, one after
// the other: guest i of the snapshot's All is b[offs[i]:offs[i+1]].
type encodedGuests struct {
	b    []byte
	offs []int
}

// guestJSONOf is the part's snapshot's guests' JSON, encoded by the first
// request that needs it and kept in the snapshot's Memo for every later one
// (a snapshot never changes); nil when the part has no Memo or a number of
// the snapshot is not one JSON can hold (each guest is then encoded as it is
// written, and the answer is refused as before).
func guestJSONOf(part *fleet.ClusterGuests) *encodedGuests {
	if part.Memo == nil || len(part.All) == 0 {
		return nil
	}
	all := part.All
	enc, _ := part.Memo.Do(func() any {
		g := &encodedGuests{b: make([]byte, 0, len(all)*200), offs: make([]int, 1, len(all)+1)}
		for i := range all {
			var ok bool
			if g.b, ok = appendGuest(g.b, &all[i]); !ok {
				return (*encodedGuests)(nil)
			}
			g.offs = append(g.offs, len(g.b))
		}
		g.b = slices.Clip(g.b)
		return g
	}).(*encodedGuests)
	return enc
}

// finite reports whether every number of the list is one JSON can hold.
func (l guestItems) finite() bool {
	for i := range l {
		for j := range l[i].Guests {
			v := &l[i].Guests[j]
			if math.IsInf(v.MaxCPU, 0) || math.IsNaN(v.MaxCPU) || math.IsInf(v.CPU, 0) || math.IsNaN(v.CPU) {
				return false
			}
		}
	}
	return true
}

// writeGuestsStreamed answers 200 with a guest list as writeEncoded would, but
// written out in chunks of about streamChunk as it is encoded, without a
// Content-Length: the fleet's list of 100 000 guests is ~30 MB, which a
// buffered answer would hold whole per request (docs/decisions/0090). A list
// with a number JSON cannot hold is checked first and answered 500 by
// writeEncoded, as every hand-encoded answer is.
func writeGuestsStreamed(w http.ResponseWriter, l guestItems, extra func(*jsonEnc)) {
	if !l.finite() {
		writeEncoded(w, http.StatusOK, "success", l, extra)
		return
	}
	e := encPool.Get().(*jsonEnc)
	e.b, e.err = e.b[:0], nil
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	e.raw(`{"code":200,"message":"success","data":`)
	l.appendItems(e, func(e *jsonEnc) {
		w.Write(e.b)
		e.b = e.b[:0]
	})
	if extra != nil {
		extra(e)
	}
	e.raw("}\n")
	w.Write(e.b)
	if cap(e.b) <= maxPooledBuffer {
		encPool.Put(e)
	}
}

// ctStatusAnswer is a container's status as ctStatusJSON shows it.
type ctStatusAnswer fleet.VMStatusView

func (a *ctStatusAnswer) appendJSON(e *jsonEnc) {
	appendGuestStatus(e, (*fleet.VMStatusView)(a), vmops.GuestCT)
}

// ha writes a guest's "ha" key: managed, and its state when managed.
func (e *jsonEnc) ha(h fleet.HAView) {
	e.key("ha", false)
	e.key("managed", true)
	e.bool(h.Managed)
	if h.State != "" {
		e.key("state", false)
		e.str(h.State)
	}
	e.raw("}")
}
