package webui

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Bulk actions from the guest list (issue 19 item 5): an operator ticks guests
// (or "all matching the filter") and a button, sees a preview of what each guest
// would do and which are skipped and why (the use case's dry run), and confirms;
// the operation's page follows it. Forms and redirects only: it works without
// script, like the rest of the UI. One bulk action acts on one cluster, as the
// use case does (docs/decisions/0084).

// bulkAction is a button of the list's bulk bar: the use case's action, and its
// options.
type bulkAction struct {
	Name  string // the form's value
	Label string // the button's words
	Verb  string // what it does to a guest, for the preview
	do    string // vmops' bulk action
	force bool
}

var bulkActions = []bulkAction{
	{"start", "Start", "start", operations.BulkStart, false},
	{"shutdown", "Shutdown", "shut down", operations.BulkStop, false},
	{"stop", "Stop", "stop at once (force)", operations.BulkStop, true},
	{"suspend", "Suspend", "suspend (pause)", operations.BulkSuspend, false},
}

// maxBulkGuests bounds the guests one form may name: an operation's limit.
const maxBulkGuests = operations.MaxOperationItems

// bulkChoice is what a bulk form chose: the action, the cluster and its guests.
type bulkChoice struct {
	Action    bulkAction
	ClusterID int64
	VMIDs     []int64
	Kinds     map[int64]string // by vmid, as the list showed them
}

// bulkView is the preview page's data.
type bulkView struct {
	Choice      bulkChoice
	ClusterName string
	Items       []bulkItem
	Acting      int    // guests that would be acted on
	Skipped     int    // guests that would be skipped
	Back        string // the list as it was filtered
	IDs         string // the vmids, for the confirming form
}

// bulkItem is one guest of the preview.
type bulkItem struct {
	operations.ItemView
	Kind string
	URL  string
}

// Noun is "VM" or "CT".
func (i bulkItem) Noun() string { return vmops.GuestKind(i.Kind).Noun() }

// readBulkAction reads the form's action.
func readBulkAction(v url.Values) (bulkAction, error) {
	name := v.Get("action")
	if i := slices.IndexFunc(bulkActions, func(a bulkAction) bool { return a.Name == name }); i >= 0 {
		return bulkActions[i], nil
	}
	return bulkAction{}, errs.E(errs.Invalid, "choose Start, Shutdown, Stop or Suspend")
}

// readBulkGuests reads the ticked guests ("cluster/kind/vmid"): bad values are
// refused, not skipped, since the form never sends them.
func readBulkGuests(vals []string) (bulkChoice, error) {
	c := bulkChoice{Kinds: map[int64]string{}}
	if len(vals) > maxBulkGuests {
		return c, errs.E(errs.Invalid, "one bulk action acts on at most %d guests", maxBulkGuests)
	}
	for _, s := range vals {
		parts := strings.Split(s, "/")
		if len(parts) != 3 {
			return c, errs.E(errs.Invalid, "a chosen guest is not one the list offered")
		}
		cid, err1 := strconv.ParseInt(parts[0], 10, 64)
		vmid, err2 := strconv.ParseInt(parts[2], 10, 64)
		kind := vmops.GuestKind(parts[1])
		if err1 != nil || err2 != nil || cid < 1 || vmid < vmops.MinVMID || vmid > vmops.MaxVMID || kind == "" || !kind.Valid() {
			return c, errs.E(errs.Invalid, "a chosen guest is not one the list offered")
		}
		if c.ClusterID != 0 && cid != c.ClusterID {
			return c, errs.E(errs.Invalid, "a bulk action acts on the guests of one cluster; choose the cluster in the list's filter first")
		}
		c.ClusterID = cid
		if _, dup := c.Kinds[vmid]; !dup {
			c.VMIDs = append(c.VMIDs, vmid)
			c.Kinds[vmid] = string(kind)
		}
	}
	return c, nil
}

// bulkPreview answers the list's bulk bar (a GET: it changes nothing): the
// guests ticked, or every one the filter matches, and the plan of the action on
// them from the use case's dry run, with what it skips and why.
func (u *UI) bulkPreview(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	vq := readVMQuery(q)
	back := "/vms" + listQuery(q)
	action, err := readBulkAction(q)
	if err != nil {
		return u.backWith(w, r, back, sentence(errorText(err)))
	}
	var c bulkChoice
	if q.Get("all") != "" {
		if err := vq.VMQuery.Validate(); err != nil {
			return u.backWith(w, r, back, sentence(errorText(err)))
		}
		l, err := u.listGuests(r, vq)
		if err != nil {
			return err
		}
		var vals []string
		for _, row := range l.rows {
			vals = append(vals, itoa(row.ClusterID)+"/"+row.Kind+"/"+itoa(row.VMID))
		}
		slices.Sort(vals)
		c, err = readBulkGuests(vals)
		if err != nil {
			return u.backWith(w, r, back, sentence(errorText(err)))
		}
	} else {
		if c, err = readBulkGuests(q["guest"]); err != nil {
			return u.backWith(w, r, back, sentence(errorText(err)))
		}
	}
	if len(c.VMIDs) == 0 {
		return u.backWith(w, r, back, "Tick the guests to act on, or “all matching the filter”.")
	}
	c.Action = action
	l, err := u.ops.Bulk(r.Context(), vmActor(r), c.ClusterID, action.do,
		operations.BulkRequest{VMIDs: c.VMIDs, Force: action.force, DryRun: true})
	if err != nil {
		return u.refusedAs(w, r, back, ucfirst(action.Label), err)
	}
	v := bulkView{Choice: c, Back: back}
	ids := make([]string, len(c.VMIDs))
	for i, id := range c.VMIDs {
		ids[i] = itoa(id)
	}
	v.IDs = strings.Join(ids, ",")
	for _, it := range l.Plan.Items {
		kind := c.Kinds[it.VMID]
		v.Items = append(v.Items, bulkItem{ItemView: it, Kind: kind, URL: guestURL(kind, c.ClusterID, it.Node, it.VMID)})
		if it.State == operations.ItemSkipped {
			v.Skipped++
		} else {
			v.Acting++
		}
	}
	if cs, err := u.fleet.Clusters(r.Context(), actor(r)); err == nil {
		if i := slices.IndexFunc(cs, func(x fleet.ClusterView) bool { return x.ID == c.ClusterID }); i >= 0 {
			v.ClusterName = cs[i].Name
		}
	}
	u.render(w, r, http.StatusOK, "bulk", u.page(w, r, action.Label+" "+strconv.Itoa(len(c.VMIDs))+" guests", "vms", v))
	return nil
}

// bulkStart starts the previewed bulk action and goes to its operation's page;
// the use case plans again (a guest may have changed since the preview) and a
// refusal goes back to the list with its reason.
func (u *UI) bulkStart(w http.ResponseWriter, r *http.Request) error {
	f := r.PostForm
	action, err := readBulkAction(f)
	if err != nil {
		return u.backWith(w, r, "/vms", sentence(errorText(err)))
	}
	cid, err := strconv.ParseInt(f.Get("cluster"), 10, 64)
	if err != nil || cid < 1 {
		return u.backWith(w, r, "/vms", "The form names no cluster; choose the guests again.")
	}
	var vmids []int64
	for _, s := range strings.Split(f.Get("vmids"), ",") {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < vmops.MinVMID || id > vmops.MaxVMID || len(vmids) >= maxBulkGuests {
			return u.backWith(w, r, "/vms", "The form's guests are not ones the list offered; choose them again.")
		}
		vmids = append(vmids, id)
	}
	l, err := u.ops.Bulk(r.Context(), vmActor(r), cid, action.do, operations.BulkRequest{VMIDs: vmids, Force: action.force})
	if err != nil {
		return u.refusedAs(w, r, "/vms?cluster="+itoa(cid), ucfirst(action.Label), err)
	}
	u.setNotice(w, r, notice{Kind: "ok", Message: ucfirst(action.Label) + " of " + strconv.Itoa(len(vmids)) + " guests has started."})
	redirect(w, r, operationURL(l.OperationID))
	return nil
}

// listQuery is the guest list's query of a bulk form (its filters and sort),
// for the way back.
func listQuery(q url.Values) string {
	c := url.Values{}
	for _, k := range []string{"q", "type", "cluster", "node", "status", "tag", "sort"} {
		if v := q.Get(k); v != "" {
			c.Set(k, v)
		}
	}
	if len(c) == 0 {
		return ""
	}
	return "?" + c.Encode()
}
