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
)

// vmsPerPage is the length of a page of the VM list.
const vmsPerPage = 50

// vmRow is one VM of the VM list.
type vmRow struct {
	fleet.VMView
	ClusterID   int64
	ClusterName string
}

// vmQuery is what the VM list is asked: fleet's filters (search, node, status,
// tag) over one or every cluster, the sort and the page.
type vmQuery struct {
	fleet.VMQuery
	Cluster int64
	Sort    string // a column, "-column" for descending
	Page    int
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
	"memory": func(a, b vmRow) int { return cmp.Compare(a.MaxMem, b.MaxMem) },
	"cpus":   func(a, b vmRow) int { return cmp.Compare(a.MaxCPU, b.MaxCPU) },
}

func readVMQuery(q url.Values) vmQuery {
	vq := vmQuery{VMQuery: fleet.VMQuery{Q: strings.TrimSpace(q.Get("q")), Node: q.Get("node"), Status: q.Get("status"),
		Tag: strings.TrimSpace(q.Get("tag"))}, Sort: q.Get("sort")}
	if _, ok := vmSorts[strings.TrimPrefix(vq.Sort, "-")]; !ok {
		vq.Sort = "vmid"
	}
	vq.Cluster, _ = strconv.ParseInt(q.Get("cluster"), 10, 64)
	vq.Page, _ = strconv.Atoi(q.Get("page"))
	vq.Page = max(vq.Page, 1)
	return vq
}

// vmsView is the VM list page's data.
type vmsView struct {
	Query    vmQuery
	Values   url.Values // the query as asked, for the links that change one part
	Clusters []fleet.ClusterView
	Nodes    []string
	Tags     []string
	Rows     []vmRow
	Total    int // VMs that pass the filters
	All      int // VMs seen
	Page     int
	Pages    int
	Errors   []string  // a filter that is no filter, clusters that could not be read
	AsOf     time.Time // the oldest of the clusters' inventory snapshots shown
}

// vmsPage lists the VMs of every cluster the caller may see (or one): fleet
// filters each cluster's inventory snapshot (fleet.VMList), the page sorts the
// matches of all clusters by a column and cuts them into pages.
func (u *UI) vmsPage(w http.ResponseWriter, r *http.Request) error {
	vq := readVMQuery(r.URL.Query())
	v := vmsView{Values: r.URL.Query()}
	if err := vq.VMQuery.Validate(); err != nil {
		v.Errors = append(v.Errors, sentence(errorText(err)))
		vq.VMQuery = fleet.VMQuery{}
	}
	v.Query = vq
	a := actor(r)
	clusters, err := u.fleet.Clusters(r.Context(), a)
	if err != nil {
		return err
	}
	v.Clusters = clusters
	read := clusters
	if vq.Cluster != 0 {
		read = slices.DeleteFunc(slices.Clone(clusters), func(c fleet.ClusterView) bool { return c.ID != vq.Cluster })
	}
	type result struct {
		all, match fleet.VMList
		err        error
	}
	results := make([]result, len(read))
	var wg sync.WaitGroup
	for i, c := range read {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), clusterRead)
			defer cancel()
			// Both from the same snapshot: the whole list for the counts and the
			// choices, the matches for the page.
			if results[i].all, results[i].err = u.fleet.VMList(ctx, a, c.ID, fleet.VMQuery{}); results[i].err == nil {
				results[i].match, results[i].err = u.fleet.VMList(ctx, a, c.ID, vq.VMQuery)
			}
		})
	}
	wg.Wait()
	nodes, tags := map[string]bool{}, map[string]bool{}
	var rows []vmRow
	for i, c := range read {
		res := results[i]
		if res.err != nil {
			v.Errors = append(v.Errors, c.Name+": "+errorText(res.err))
			continue
		}
		if v.AsOf.IsZero() || res.match.AsOf.Before(v.AsOf) {
			v.AsOf = res.match.AsOf
		}
		for _, vm := range res.all.VMs {
			nodes[vm.Node] = true
			for _, t := range vm.Tags {
				tags[t] = true
			}
		}
		v.All += len(res.all.VMs)
		for _, vm := range res.match.VMs {
			rows = append(rows, vmRow{VMView: vm, ClusterID: c.ID, ClusterName: c.Name})
		}
	}
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
	v.Nodes = sortedKeys(nodes)
	v.Tags = sortedKeys(tags)
	u.render(w, r, http.StatusOK, "vms", u.page(w, r, "VMs", "vms", v))
	return nil
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

// errVMPath is the answer to a VM path that cannot name a VM.
func errVMPath(what string) error {
	return errs.E(errs.NotFound, "there is no VM at this address (%s)", what)
}
