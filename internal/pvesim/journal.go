package pvesim

import (
	"sort"
	"time"
)

// The journal records what happened in the cluster — nodes going down and
// up, quorum, guests starting, stopping and moving, Ceph flags — with the
// emulated time, and keeps the peaks a benchmark asserts on (migrations at
// once, nodes down at once, each node's memory). It is the emulator's own
// account, not a PVE API: PVE has no single place that says all of this.

// Kinds of journal entries.
const (
	JournalNodeShutdown   = "node-shutdown"    // Detail: "reboot" or "shutdown"
	JournalNodeDown       = "node-down"        // the node stopped answering
	JournalNodeUp         = "node-up"          // the node answers again
	JournalNodeBoot       = "node-boot"        // Detail: the kernel it runs
	JournalNodeBootHung   = "node-boot-hung"   // SetBootFailure kept it down
	JournalQuorumLost     = "quorum-lost"      //
	JournalQuorumRegained = "quorum-regained"  //
	JournalGuestStarted   = "guest-started"    // Node: where it runs
	JournalGuestStopped   = "guest-stopped"    //
	JournalGuestMoved     = "guest-moved"      // Node: the new node; Detail: the old one
	JournalCephFlag       = "ceph-flag"        // Detail: "noout=1"
	JournalHAState        = "ha-state"         // Detail: the HA service state
	JournalPackages       = "packages-updated" // Detail: the newest kernel installed
)

// maxJournal bounds the journal; the oldest entries go first.
const maxJournal = 200000

// JournalEntry is one thing that happened.
type JournalEntry struct {
	At     time.Time
	Kind   string
	Node   string
	VMID   int
	Detail string
}

// journal is the record and its peaks; guarded by Cluster.mu.
type journal struct {
	entries        []JournalEntry
	migrations     int // migration tasks running now
	peakMigrations int
	peakDown       int
	peakMem        map[string]int64 // node → highest memory used seen
}

// note adds an entry; c.mu must be held.
func (c *Cluster) note(at time.Time, kind, node string, vmid int, detail string) {
	j := &c.journal
	if len(j.entries) >= maxJournal {
		j.entries = append(j.entries[:0:0], j.entries[len(j.entries)-maxJournal/2:]...)
	}
	j.entries = append(j.entries, JournalEntry{At: at, Kind: kind, Node: node, VMID: vmid, Detail: detail})
}

// noteDown records how many nodes are offline now; c.mu must be held.
func (c *Cluster) noteDown(at time.Time) {
	down := 0
	for _, n := range c.nodes {
		if !n.online {
			down++
		}
	}
	c.journal.peakDown = max(c.journal.peakDown, down)
}

// noteMemory records a node's memory use after a guest started or arrived;
// c.mu must be held.
func (c *Cluster) noteMemory(n *node, at time.Time) {
	_, used, _, _ := c.nodeStats(n, at)
	if c.journal.peakMem == nil {
		c.journal.peakMem = map[string]int64{}
	}
	c.journal.peakMem[n.name] = max(c.journal.peakMem[n.name], used)
}

// guestStarted, guestStopped and guestMoved are the journal's hooks in the
// power and migration code; c.mu must be held.
func (c *Cluster) guestStarted(g *guest, at time.Time) {
	c.note(at, JournalGuestStarted, g.node, g.vmid, "")
	c.noteMemory(c.nodes[g.node], at)
}

func (c *Cluster) guestStopped(g *guest, at time.Time) {
	c.note(at, JournalGuestStopped, g.node, g.vmid, "")
	c.endConsolesOf(g.vmid) // QEMU or lxc-console ends with the guest
}

func (c *Cluster) guestMoved(g *guest, from string, at time.Time) {
	c.note(at, JournalGuestMoved, g.node, g.vmid, from)
	c.endConsolesOf(g.vmid) // the source's QEMU or lxc-console is gone
	c.noteMemory(c.nodes[g.node], at)
	if g.ha {
		c.crmSoon(at) // the HA manager looks at where its services are
	}
}

func isMigration(typ string) bool { return typ == "qmigrate" || typ == "vzmigrate" }

// Journal returns what happened so far, oldest first (at most the last
// 100 000 to 200 000 entries).
func (c *Cluster) Journal() []JournalEntry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]JournalEntry(nil), c.journal.entries...)
}

// Peaks are the highest values seen since the cluster was built (or
// ResetPeaks).
type Peaks struct {
	// Migrations is the most qmigrate and vzmigrate tasks running at once.
	Migrations int
	// NodesDown is the most nodes offline at once.
	NodesDown int
	// MemUsed is each node's highest memory use, as /nodes/{node}/status
	// reports it, sampled whenever a guest started on or moved to it.
	MemUsed map[string]int64
	// MemTotal is each node's memory.
	MemTotal map[string]int64
}

// MemPercent is a node's peak memory use in percent of its memory.
func (p Peaks) MemPercent(node string) float64 {
	if p.MemTotal[node] == 0 {
		return 0
	}
	return float64(p.MemUsed[node]) * 100 / float64(p.MemTotal[node])
}

// Peaks returns the peaks.
func (c *Cluster) Peaks() Peaks {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p := Peaks{Migrations: c.journal.peakMigrations, NodesDown: c.journal.peakDown,
		MemUsed: map[string]int64{}, MemTotal: map[string]int64{}}
	for name, n := range c.nodes {
		p.MemTotal[name] = n.mem
		p.MemUsed[name] = c.journal.peakMem[name]
	}
	return p
}

// ResetPeaks starts the peaks anew from the present state (the journal is
// kept).
func (c *Cluster) ResetPeaks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	j := &c.journal
	j.peakMigrations, j.peakDown, j.peakMem = j.migrations, 0, map[string]int64{}
	c.noteDown(now)
	names := make([]string, 0, len(c.nodes))
	for name := range c.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c.noteMemory(c.nodes[name], now)
	}
}
