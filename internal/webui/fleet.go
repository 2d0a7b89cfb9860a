package webui

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

// actor is the caller as internal/fleet sees it, with the request as it was
// made (attempt) for the audit record of a refused grant.
func actor(r *http.Request) fleet.Actor {
	p := principal(r)
	return fleet.Actor{UserID: p.UserID, Email: p.Email, Role: p.Role, Via: attempt(r)}
}

// vmActor is the caller as the use cases of internal/vmops take it: they check
// its grant themselves and record it.
func vmActor(r *http.Request) vmops.Actor {
	p := principal(r)
	return vmops.Actor{UserID: p.UserID, Email: p.Email, Role: p.Role, Via: attempt(r)}
}

// clusterRead bounds the inventory reads of one page, so that one slow cluster
// cannot hold the page: the cluster shows its error instead.
const clusterRead = 8 * time.Second

// fleetCluster is one cluster on the fleet page.
type fleetCluster struct {
	fleet.ClusterView
	Nodes   []fleetNode
	Running int
	Stopped int
	Err     string // why the nodes or VMs could not be read
}

type fleetNode struct {
	fleet.NodeView
	VMs int // VMs on the node
}

// statusWord is a cluster's health as the fleet page says it.
func statusWord(s string) string {
	if s == fleet.StatusUnavailable {
		return "unreachable"
	}
	return s
}

// fleetPage shows every cluster the caller may see: health, nodes with CPU and
// memory, VMs running and stopped. The clusters are read at once.
func (u *UI) fleetPage(w http.ResponseWriter, r *http.Request) error {
	views, err := u.fleet.Clusters(r.Context(), actor(r))
	if err != nil {
		return err
	}
	out := make([]fleetCluster, len(views))
	var wg sync.WaitGroup
	for i, cv := range views {
		cv.Status = statusWord(cv.Status)
		out[i] = fleetCluster{ClusterView: cv}
		wg.Go(func() { u.readCluster(r.Context(), actor(r), &out[i]) })
	}
	wg.Wait()
	u.render(w, r, http.StatusOK, "fleet", u.page(w, r, "Fleet", "fleet", out))
	return nil
}

// readCluster fills a cluster's nodes and VM counts as a may read them (it holds
// a grant: Clusters lists only those).
func (u *UI) readCluster(ctx context.Context, a fleet.Actor, c *fleetCluster) {
	ctx, cancel := context.WithTimeout(ctx, clusterRead)
	defer cancel()
	var (
		nodes []fleet.NodeView
		vms   []fleet.VMView
		nErr  error
		vErr  error
		wg    sync.WaitGroup
	)
	wg.Go(func() { nodes, nErr = u.fleet.Nodes(ctx, a, c.ID) })
	wg.Go(func() { vms, vErr = u.fleet.VMs(ctx, a, c.ID) })
	wg.Wait()
	if err := firstErr(nErr, vErr); err != nil {
		c.Err = errorText(err)
	}
	perNode := map[string]int{}
	for _, v := range vms {
		perNode[v.Node]++
		if v.Status == "running" {
			c.Running++
		} else {
			c.Stopped++
		}
	}
	for _, n := range nodes {
		c.Nodes = append(c.Nodes, fleetNode{NodeView: n, VMs: perNode[n.Node]})
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// errorText is what a page says of an error: its message when it has one a person
// may see, else "internal error" (the cause goes to the log with the request).
func errorText(err error) string {
	if e, ok := errs.As(err); ok && e.Kind != errs.Internal {
		return e.Message
	}
	return "internal error"
}
