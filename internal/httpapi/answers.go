package httpapi

import (
	"slices"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The hand encodings of the hot answers (jsonenc.go). Each writes exactly what
// encoding/json writes for the struct named in its comment, which stays the
// documented shape (and the encoding of everything else).

// taskAnswer is a task as taskJSON shows it.
type taskAnswer vmops.TaskView

func (t *taskAnswer) appendJSON(e *jsonEnc) {
	v := (*vmops.TaskView)(t)
	e.key("taskId", true)
	e.strOrNull(v.TaskID)
	e.key("taskRef", false)
	if v.TaskRef != 0 {
		e.int(v.TaskRef)
	} else {
		e.raw("null")
	}
	e.key("clusterId", false)
	e.int(v.ClusterID)
	e.key("node", false)
	e.str(v.Node)
	e.key("type", false)
	e.str(v.Type)
	e.key("guestKind", false)
	e.strOrNull(v.GuestKind())
	e.key("op", false)
	e.strOrNull(v.Op())
	e.key("isMigration", false)
	e.bool(v.IsMigration())
	e.key("vmid", false)
	if v.VMID != 0 {
		e.int(v.VMID)
	} else {
		e.raw("null")
	}
	e.key("pveUser", false)
	e.strOrNull(v.PVEUser)
	e.key("startedBy", false)
	e.strOrNull(v.StartedBy)
	e.key("status", false)
	e.str(v.Status)
	e.key("exitStatus", false)
	e.strOrNull(v.ExitStatus)
	e.key("result", false)
	e.str(v.Result)
	e.key("error", false)
	e.strOrNull(v.Error)
	e.key("startTime", false)
	e.time(v.StartTime.UTC())
	e.key("endTime", false)
	if v.Finished() && !v.EndTime.IsZero() {
		e.time(v.EndTime.UTC())
	} else {
		e.raw("null")
	}
	e.key("target", false)
	e.strOrNull(v.Target)
	e.key("progress", false)
	if p := v.Progress; p != nil {
		e.key("percent", true)
		e.float(p.Percent)
		e.key("transferredBytes", false)
		e.int(p.TransferredBytes)
		e.key("totalBytes", false)
		e.int(p.TotalBytes)
		e.key("bytesPerSecond", false)
		e.int(p.BytesPerSecond)
		e.key("phase", false)
		e.str(p.Phase)
		e.key("downtimeSeconds", false)
		if p.DowntimeSeconds != nil {
			e.int(*p.DowntimeSeconds)
		} else {
			e.raw("null")
		}
		e.raw("}")
	} else {
		e.raw("null")
	}
	e.key("followTaskId", false)
	e.strOrNull(v.FollowTaskID)
	e.stale(v.Stale, v.StaleSince)
	e.raw("}")
}

// taskList is a list of tasks as []taskJSON shows it.
type taskList []vmops.TaskView

func (l taskList) appendJSON(e *jsonEnc) {
	e.raw("[")
	for i := range l {
		if i > 0 {
			e.raw(",")
		}
		(*taskAnswer)(&l[i]).appendJSON(e)
	}
	e.raw("]")
}

// vmStatusAnswer is a VM's status as vmStatusJSON shows it.
type vmStatusAnswer fleet.VMStatusView

func (a *vmStatusAnswer) appendJSON(e *jsonEnc) {
	appendGuestStatus(e, (*fleet.VMStatusView)(a), vmops.GuestVM)
}

// appendGuestStatus writes a guest's status: the fields both kinds share, in one
// order, and a kind's own ones in their place (a VM's qmpStatus, a container's
// maxSwap).
func appendGuestStatus(e *jsonEnc, a *fleet.VMStatusView, kind vmops.GuestKind) {
	e.key("vmid", true)
	e.int(a.VMID)
	e.key("node", false)
	e.str(a.Node)
	e.key("name", false)
	e.str(a.Name)
	e.key("type", false)
	e.str(string(kind))
	e.key("status", false)
	e.str(a.Status)
	if kind == vmops.GuestVM {
		e.key("qmpStatus", false)
		e.str(a.QMPStatus)
	}
	e.key("lock", false)
	e.str(a.Lock)
	e.ha(a.HA)
	e.key("uptime", false)
	e.int(a.Uptime)
	e.key("cpus", false)
	e.float(a.CPUs)
	e.key("maxMem", false)
	e.int(a.MaxMem)
	if kind == vmops.GuestCT {
		e.key("maxSwap", false)
		e.int(a.MaxSwap)
	}
	e.key("maxDisk", false)
	e.int(a.MaxDisk)
	e.key("tags", false)
	e.strs(a.Tags)
	e.stale(a.Stale, a.StaleSince)
	e.raw("}")
}

// stale writes the "stale" and "staleSince" keys of an answer PVE could not
// refresh.
func (e *jsonEnc) stale(stale bool, since time.Time) {
	e.key("stale", false)
	e.bool(stale)
	e.key("staleSince", false)
	if stale {
		e.time(since.UTC())
	} else {
		e.raw("null")
	}
}

// nodeList is a cluster's nodes as []nodeJSON shows them.
type nodeList []fleet.NodeView

func (l nodeList) appendJSON(e *jsonEnc) {
	e.raw("[")
	for i := range l {
		n := &l[i]
		if i > 0 {
			e.raw(",")
		}
		e.key("node", true)
		e.str(n.Node)
		e.key("status", false)
		e.str(n.Status)
		e.key("cpu", false)
		e.float(n.CPU)
		e.key("maxCpu", false)
		e.int(n.MaxCPU)
		e.key("mem", false)
		e.int(n.Mem)
		e.key("maxMem", false)
		e.int(n.MaxMem)
		e.key("uptime", false)
		e.int(n.Uptime)
		e.key("maintenance", false)
		if m := n.Maintenance; m != nil {
			e.key("since", true)
			e.time(m.Since.UTC())
			e.key("by", false)
			e.str(m.By)
			e.key("operationId", false)
			e.int(m.OperationID)
			e.raw("}")
		} else {
			e.raw("null")
		}
		e.raw("}")
	}
	e.raw("]")
}

// vmList is a cluster's VMs as []vmJSON shows them. It is the one answer that
// may hold 10 000 entries: it appends to a local slice, grown once to about the
// size it needs, so the loop neither regrows the buffer nor stores the slice to
// the heap (and through the GC's write barrier) on every field.
type vmList []fleet.VMView

func (l vmList) appendJSON(e *jsonEnc) {
	b := slices.Grow(e.b, 2+len(l)*160)
	b = append(b, '[')
	finite := true
	for i := range l {
		v := &l[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"vmid":`...)
		b = strconv.AppendInt(b, v.VMID, 10)
		b = append(b, `,"name":`...)
		b = appendString(b, v.Name)
		b = append(b, `,"node":`...)
		b = appendString(b, v.Node)
		b = append(b, `,"status":`...)
		b = appendString(b, v.Status)
		b = append(b, `,"lock":`...)
		b = appendString(b, v.Lock)
		b = append(b, `,"tags":[`...)
		for j, t := range v.Tags {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendString(b, t)
		}
		b = append(b, `],"haState":`...)
		b = appendString(b, v.HAState)
		b = append(b, `,"maxMem":`...)
		b = strconv.AppendInt(b, v.MaxMem, 10)
		b = append(b, `,"maxCpu":`...)
		var ok bool
		b, ok = appendFloat(b, v.MaxCPU)
		finite = finite && ok
		b = append(b, '}')
	}
	e.b = append(b, ']')
	if !finite && e.err == nil {
		e.err = errNotFinite
	}
}

// asOf writes an inventory answer's top-level fields after data: "asOf", when
// PVE was read (RFC 3339, milliseconds), and for a paged list "nextCursor", the
// cursor of the next page or null on the last (docs/decisions, inventory).
func (e *jsonEnc) asOf(at time.Time, next string, paged bool) {
	e.raw(`,"asOf":`)
	e.time(at.UTC().Truncate(time.Millisecond))
	if paged {
		e.raw(`,"nextCursor":`)
		e.strOrNull(next)
	}
}
