package webui

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

// vmsPerPage is the length of a page of the guest list.
const vmsPerPage = 50

// The guest list (issue 18): VMs and containers of every cluster the caller may
// see, each with its type, filtered by type, node, status, tag and text; a
// guest's CPU, memory and uptime are what the inventory snapshot says
// (/cluster/resources). An operator ticks guests (or every one the filter
// matches) for a bulk action (bulk.go).

// vmRow is one guest of the list.
type vmRow struct {
	fleet.VMView
	Kind        string // "qemu" or "lxc"
	ClusterID   int64
	ClusterName string
	CanAct      bool // the caller may act on the guest's cluster: its box for a bulk action
}

// Noun is "VM" or "CT".
func (r vmRow) Noun() string { return vmops.GuestKind(r.Kind).Noun() }

// Running says whether the guest runs, for the figures only a running guest has.
func (r vmRow) Running() bool { return r.Status == fleet.VMStatusRunning }

// vmQuery is what the guest list is asked: fleet's filters (search, node,
// status, tag) and the kind over one or every cluster, the sort and the page.
type vmQuery struct {
	fleet.VMQuery
	Type    string // "qemu", "lxc" or "" for both
	Cluster int64
	Sort    string // a column, "-column" for descending
	Page    int
}

// kinds are the kinds of guest the query reads.
func (q vmQuery) kinds() []string {
	if q.Type != "" {
		return []string{q.Type}
	}
	return []string{string(vmops.GuestVM), string(vmops.GuestCT)}
}

// vmSorts are the columns the list sorts by.
var vmSorts = map[string]func(a, b vmRow) int{
	"vmid": func(a, b vmRow) int { return cmp.Compare(a.VMID, b.VMID) },
	"name": func(a, b vmRow) int { return cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)) },
	"cluster": func(a, b vmRow) int {
		return cmp.Compare(strings.ToLower(a.ClusterName), strings.ToLower(b.ClusterName))
	},
	"node":   func(a, b vmRow) int { return cmp.Compare(a.Node, b.Node) },
	"status": func(a, b vmRow) int { return cmp.Compare(a.Status, b.Status) },
	"type":   func(a, b vmRow) int { return cmp.Compare(a.Kind, b.Kind) },
	"memory": func(a, b vmRow) int { return cmp.Compare(a.MaxMem, b.MaxMem) },
	"cpus":   func(a, b vmRow) int { return cmp.Compare(a.MaxCPU, b.MaxCPU) },
	"cpu":    func(a, b vmRow) int { return cmp.Compare(a.CPU, b.CPU) },
	"mem":    func(a, b vmRow) int { return cmp.Compare(a.Mem, b.Mem) },
	"uptime": func(a, b vmRow) int { return cmp.Compare(a.Uptime, b.Uptime) },
}

func readVMQuery(q url.Values) vmQuery {
	vq := vmQuery{VMQuery: fleet.VMQuery{Q: strings.TrimSpace(q.Get("q")), Node: q.Get("node"), Status: q.Get("status"),
		Tag: strings.TrimSpace(q.Get("tag"))}, Sort: q.Get("sort")}
	if _, ok := vmSorts[strings.TrimPrefix(vq.Sort, "-")]; !ok {
		vq.Sort = "vmid"
	}
	if t := q.Get("type"); t == string(vmops.GuestVM) || t == string(vmops.GuestCT) {
		vq.Type = t
	}
	vq.Cluster, _ = strconv.ParseInt(q.Get("cluster"), 10, 64)
	vq.Page, _ = strconv.Atoi(q.Get("page"))
	vq.Page = max(vq.Page, 1)
	return vq
}

// vmsView is the guest list page's data.
type vmsView struct {
	Query    vmQuery
	Filtered bool       // a filter is set (the bulk form's "all matching")
	CanBulk  bool       // bulk actions are served and the caller may act on a cluster shown
	Values   url.Values // the query as asked, for the links that change one part
	Clusters []fleet.ClusterView
	Nodes    []string
	Tags     []string
	Rows     []vmRow
	Total    int // guests that pass the filters
	All      int // guests seen
	Page     int
	Pages    int
	Errors   []string  // a filter that is no filter, clusters that could not be read
	AsOf     time.Time // the oldest of the clusters' inventory snapshots shown
}

// vmsPage lists the guests of every cluster the caller may see (or one): fleet
// filters each cluster's inventory snapshot (fleet.GuestList), the page sorts the
// matches of all clusters by a column and cuts them into pages.
func (u *UI) vmsPage(w http.ResponseWriter, r *http.Request) error {
	vq := readVMQuery(r.URL.Query())
	v := vmsView{Values: r.URL.Query()}
	if err := vq.VMQuery.Validate(); err != nil {
		v.Errors = append(v.Errors, sentence(errorText(err)))
		vq.VMQuery = fleet.VMQuery{}
	}
	v.Query = vq
	v.Filtered = vq.Q != "" || vq.Node != "" || vq.Status != "" || vq.Tag != "" || vq.Type != "" || vq.Cluster != 0
	l, err := u.listGuests(r, vq)
	if err != nil {
		return err
	}
	v.Clusters, v.Errors, v.AsOf, v.All = l.clusters, append(v.Errors, l.errors...), l.asOf, l.all
	rows := l.rows
	for _, row := range rows {
		v.CanBulk = v.CanBulk || row.CanAct
	}
	v.CanBulk = v.CanBulk && u.ops != nil
	by := vmSorts[strings.TrimPrefix(vq.Sort, "-")]
	desc := strings.HasPrefix(vq.Sort, "-")
	slices.SortStableFunc(rows, func(a, b vmRow) int {
		c := by(a, b)
		if c == 0 {
			c = cmp.Or(cmp.Compare(a.ClusterID, b.ClusterID), cmp.Compare(a.VMID, b.VMID))
		}
		if desc {
			return -c
		}
		return c
	})
	v.Total = len(rows)
	v.Pages = max(1, (len(rows)+vmsPerPage-1)/vmsPerPage)
	v.Page = min(vq.Page, v.Pages)
	v.Rows = rows[(v.Page-1)*vmsPerPage : min(len(rows), v.Page*vmsPerPage)]
	v.Nodes = l.nodes
	v.Tags = l.tags
	u.render(w, r, http.StatusOK, "vms", u.page(w, r, "Guests", "vms", v))
	return nil
}

// guestListing is what listGuests read: the matching guests of every cluster
// asked, and what the filters' choices and the counts need.
type guestListing struct {
	clusters    []fleet.ClusterView // every cluster the caller may see
	rows        []vmRow             // the guests that match, unsorted
	all         int                 // the guests seen
	nodes, tags []string            // of every guest seen
	errors      []string            // clusters that could not be read
	asOf        time.Time           // the oldest snapshot shown
}

// listGuests reads the guests vq selects from each cluster's snapshots (one per
// kind), the clusters at once.
func (u *UI) listGuests(r *http.Request, vq vmQuery) (guestListing, error) {
	var l guestListing
	a := actor(r)
	clusters, err := u.fleet.Clusters(r.Context(), a)
	if err != nil {
		return l, err
	}
	l.clusters = clusters
	read := clusters
	if vq.Cluster != 0 {
		read = slices.DeleteFunc(slices.Clone(clusters), func(c fleet.ClusterView) bool { return c.ID != vq.Cluster })
	}
	type result struct {
		all, match fleet.VMList
		err        error
	}
	kinds := vq.kinds()
	results := make([]result, len(read)*len(kinds))
	var wg sync.WaitGroup
	for i, c := range read {
		for j, kind := range kinds {
			res := &results[i*len(kinds)+j]
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(r.Context(), clusterRead)
				defer cancel()
				// Both from the same snapshot: the whole list for the counts and the
				// choices, the matches for the page.
				if res.all, res.err = u.fleet.GuestList(ctx, a, c.ID, kind, fleet.VMQuery{}); res.err == nil {
					res.match, res.err = u.fleet.GuestList(ctx, a, c.ID, kind, vq.VMQuery)
				}
			})
		}
	}
	wg.Wait()
	nodes, tags := map[string]bool{}, map[string]bool{}
	for i, c := range read {
		canAct := c.Role != "" && c.Role != fleet.GrantViewer // operator or admin: the use case checks again
		for j, kind := range kinds {
			res := results[i*len(kinds)+j]
			if res.err != nil {
				l.errors = append(l.errors, c.Name+": "+errorText(res.err))
				break // one line per cluster: both kinds are read from the same PVE answer
			}
			if l.asOf.IsZero() || res.match.AsOf.Before(l.asOf) {
				l.asOf = res.match.AsOf
			}
			for _, vm := range res.all.VMs {
				nodes[vm.Node] = true
				for _, t := range vm.Tags {
					tags[t] = true
				}
			}
			l.all += len(res.all.VMs)
			for _, vm := range res.match.VMs {
				l.rows = append(l.rows, vmRow{VMView: vm, Kind: kind, ClusterID: c.ID, ClusterName: c.Name, CanAct: canAct})
			}
		}
	}
	l.nodes, l.tags = sortedKeys(nodes), sortedKeys(tags)
	return l, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sortLink is the query of a column header's link: sort by it, ascending, or
// descending when it already sorts ascending.
func sortLink(q url.Values, current, col string) string {
	next := col
	if current == col {
		next = "-" + col
	}
	return queryWith(q, "sort", next)
}

// sortMark says how a column sorts now, for aria-sort.
func sortMark(current, col string) string {
	switch current {
	case col:
		return "ascending"
	case "-" + col:
		return "descending"
	}
	return ""
}

// errVMPath is the answer to a node's path that cannot name one.
func errVMPath(what string) error {
	return errs.E(errs.NotFound, "there is no node at this address (%s)", what)
}
