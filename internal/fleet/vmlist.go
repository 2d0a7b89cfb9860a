package fleet

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// VMQuery selects and pages a cluster's VMs (VMList). Every field is optional;
// the zero VMQuery is every VM.
type VMQuery struct {
	Node   string // only VMs on this node
	Status string // only VMs in this state: VMStatusRunning, VMStatusStopped or VMStatusUnknown
	Tag    string // only VMs with this tag (exactly)
	Pool   string // only VMs in this resource pool (exactly)
	// Q keeps the VMs whose name holds it, ignoring case, or whose vmid it is.
	Q string
	// Limit is the most VMs of one page, 1 to MaxVMPage; 0 is no paging.
	Limit int
	// Cursor continues after the page whose NextCursor it is; "" starts at the
	// lowest vmid. It is opaque to clients.
	Cursor string

	// lq is Q lower-cased and qid the vmid Q names (0: none), worked out once
	// per page (page), not once per guest.
	lq  string
	qid int64
	// scope, when not nil, keeps only the guests the caller's scoped grant
	// covers (scope.go); set by the lists, never by a caller.
	scope *store.GrantScope
}

// The states /cluster/resources gives a VM (unknown: its node does not answer).
const (
	VMStatusRunning = "running"
	VMStatusStopped = "stopped"
	VMStatusUnknown = "unknown"
)

// Bounds of VMQuery's values.
const (
	MaxVMPage  = 10000
	maxTagLen  = 128 // PVE's tags are short words
	maxPoolLen = 128
	maxQLen    = 128
)

// VMList is one page of a cluster's VMs by VMID, as of AsOf.
type VMList struct {
	VMs []VMView // shared with other answers: read only
	// All are every guest of the snapshot VMs come from, of both kinds by vmid
	// (VMs are among them), and Memo what a front end keeps of them (the API:
	// each guest's JSON). Read only.
	All  []VMView
	Memo *Memo
	// AsOf is when PVE was read; at most SnapshotMaxAge before the request.
	AsOf time.Time
	// NextCursor continues with the next page (VMQuery.Cursor); "" on the last.
	NextCursor string
}

// Validate checks every value of q, saying what is wrong with the first bad one
// (invalid_request). VMList checks too; a front end calls it before
// authorizing, so that a bad request is 400 whatever the caller's grants.
func (q VMQuery) Validate() error {
	_, err := q.validate()
	return err
}

func (q VMQuery) validate() (after int64, err error) {
	switch {
	case q.Node != "" && !pve.ValidNode(q.Node):
		return 0, invalid("node %q is not a PVE node name", quoteSafe(q.Node))
	case q.Status != "" && q.Status != VMStatusRunning && q.Status != VMStatusStopped && q.Status != VMStatusUnknown:
		return 0, invalid("status must be %s, %s or %s", VMStatusRunning, VMStatusStopped, VMStatusUnknown)
	case q.Tag != "" && !validTag(q.Tag):
		return 0, invalid("tag %q is not a PVE tag (letters, digits, _ - + . ; at most %d)", quoteSafe(q.Tag), maxTagLen)
	case q.Pool != "" && !validPool(q.Pool):
		return 0, invalid("pool %q is not a PVE pool id (letters, digits, _ -, nested with /; at most %d)", quoteSafe(q.Pool), maxPoolLen)
	case q.Q != "" && (len(q.Q) > maxQLen || !utf8.ValidString(q.Q) || strings.IndexFunc(q.Q, unicode.IsControl) >= 0):
		return 0, invalid("q must be at most %d bytes of text", maxQLen)
	case q.Limit < 0 || q.Limit > MaxVMPage:
		return 0, invalid("limit must be an integer from 1 to %d", MaxVMPage)
	}
	if q.Cursor == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(q.Cursor, 10, 64)
	if err != nil || n < pve.MinVMID || n > pve.MaxVMID || strconv.FormatInt(n, 10) != q.Cursor {
		return 0, invalid("cursor is not one vmgate gave (nextCursor)")
	}
	return n, nil
}

// validTag accepts PVE's tag syntax: [a-z0-9_][a-z0-9_+.-]*, either case.
func validTag(t string) bool {
	if len(t) > maxTagLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		case i > 0 && (c == '-' || c == '+' || c == '.'):
		default:
			return false
		}
	}
	return t != ""
}

// validPool accepts PVE's pool ids: [A-Za-z0-9_][A-Za-z0-9_-]*, nested pools
// joined by '/' (PVE 8.1 and later).
func validPool(p string) bool {
	if len(p) > maxPoolLen {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part[0] == '-' {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
				return false
			}
		}
	}
	return true
}

func (q VMQuery) filters() bool {
	return q.Node != "" || q.Status != "" || q.Tag != "" || q.Pool != "" || q.Q != "" || q.scope != nil
}

// match reports whether v passes q's filters.
func (q VMQuery) match(v *VMView) bool {
	switch {
	case q.scope != nil && !q.scope.Covers(v.Pool, v.Tags):
		return false
	case q.Node != "" && v.Node != q.Node,
		q.Status != "" && v.Status != q.Status,
		q.Pool != "" && v.Pool != q.Pool:
		return false
	case q.Tag != "":
		found := false
		for _, t := range v.Tags {
			found = found || t == q.Tag
		}
		if !found {
			return false
		}
	}
	return q.Q == "" || q.nameMatch(v) || q.idMatch(v)
}

// idMatch reports whether Q names v's vmid.
func (q VMQuery) idMatch(v *VMView) bool {
	if q.lq != "" { // page worked qid out
		return q.qid != 0 && v.VMID == q.qid
	}
	return strconv.FormatInt(v.VMID, 10) == q.Q
}

// nameMatch reports whether v's name holds q.Q, ignoring case: in the name
// lower-cased once per snapshot when v has it (q.lq is q.Q lower-cased, set by
// page), else folding as it compares.
func (q VMQuery) nameMatch(v *VMView) bool {
	if v.lname != "" && q.lq != "" {
		return strings.Contains(v.lname, q.lq)
	}
	return containsFold(v.Name, q.Q)
}

// containsFold reports whether sub occurs in s, ignoring case, without
// allocating (a VM list is filtered 10 000 names at a time).
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// VMList returns the page of a cluster's QEMU guests by VMID that q selects, from
// a snapshot younger than SnapshotMaxAge or one /cluster/resources?type=vm read
// shared by every request meanwhile (snapshot.go). Filters and paging are applied
// here, on the snapshot: PVE is read the same way whatever the query. A bad value
// of q is invalid_request. It needs a viewer grant.
func (s *Service) VMList(ctx context.Context, a Actor, clusterID int64, q VMQuery) (VMList, error) {
	return s.GuestList(ctx, a, clusterID, string(pve.Qemu), q)
}

// GuestList is VMList for the guests of kind, PVE's name of it: "qemu" are
// VMList, "lxc" a cluster's containers, "" every guest of both kinds by vmid
// (each with its Type). Every kind is answered from the one snapshot of the
// cluster's guests (one read of /cluster/resources?type=vm answers both). It
// needs a viewer grant.
func (s *Service) GuestList(ctx context.Context, a Actor, clusterID int64, kindName string, q VMQuery) (VMList, error) {
	kind := pve.GuestKind(kindName)
	if kind != "" && !kind.Valid() {
		return VMList{}, invalid("type must be %s or %s", pve.Qemu, pve.LXC)
	}
	after, err := q.validate()
	if err != nil {
		return VMList{}, err
	}
	if err := s.requireRead(ctx, a, clusterID); err != nil {
		return VMList{}, err
	}
	if q.scope, err = s.scopeOf(ctx, a, clusterID); err != nil {
		return VMList{}, err
	}
	sn, err := s.guests(ctx, clusterID)
	if err != nil {
		return VMList{}, err
	}
	out := VMList{AsOf: sn.at, All: sn.val.all, Memo: sn.val.memo}
	var more bool
	out.VMs, more = q.page(sn.val.of(kind), after, q.Limit)
	if more {
		out.NextCursor = strconv.FormatInt(out.VMs[len(out.VMs)-1].VMID, 10)
	}
	return out, nil
}

// guests returns the cluster's guest snapshot (snapshot.go).
func (s *Service) guests(ctx context.Context, clusterID int64) (*snapshot[guestSet], error) {
	return s.guestSnaps.get(ctx, clusterID, s.now, func(ctx context.Context) (guestSet, error) {
		res, err := s.guestResources(ctx, clusterID)
		if err != nil {
			return guestSet{}, err
		}
		return guestViews(res), nil
	})
}

// page returns at most limit (0: no limit) guests of all, which is sorted by
// vmid, after the vmid after (0: from the start) that pass q's filters, and
// whether more would pass after them. An unfiltered page is a sub-slice of all.
func (q VMQuery) page(all []VMView, after int64, limit int) (page []VMView, more bool) {
	start := 0
	if after > 0 {
		start = sort.Search(len(all), func(i int) bool { return all[i].VMID > after })
	}
	if !q.filters() {
		end := len(all)
		if limit > 0 && start+limit < end {
			end, more = start+limit, true
		}
		return all[start:end:end], more
	}
	q.lq = strings.ToLower(q.Q)
	if id, err := strconv.ParseInt(q.Q, 10, 64); err == nil && strconv.FormatInt(id, 10) == q.Q {
		q.qid = id
	}
	page = make([]VMView, 0, min(max(limit, 16), len(all)-start))
	for i := start; i < len(all); i++ {
		if !q.match(&all[i]) {
			continue
		}
		if limit > 0 && len(page) == limit {
			return page, true
		}
		page = append(page, all[i])
	}
	return page, false
}
