package vmops

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Migration phases, in the order a migration passes through them.
const (
	PhaseStarting   = "starting"   // preparing: tunnel, remote VM start, before any data moves
	PhaseDisk       = "disk"       // local disks being copied or mirrored
	PhaseMemory     = "memory"     // the VM's RAM and device state being sent
	PhaseCompleting = "completing" // the state is across; PVE switches over and cleans up
	PhaseDone       = "done"       // migration finished successfully
	PhaseFailed     = "failed"     // migration aborted or finished with problems

	// A container's restart migration (pve-container's LXC/Migrate.pm):
	// shutdown, then its local volumes copied, then its start on the target.
	PhaseShutdown = "shutdown" // the container is being shut down on its node
	PhaseStorage  = "storage"  // its local volumes are being copied (dd's byte counts)
	PhaseStart    = "start"    // it is being started on the target
)

// Progress is a migration's progress as read from PVE's task log (docs/design.md §3.3).
//
// The byte counts are the whole migration's: local disks being mirrored plus the VM
// state, so Percent = TransferredBytes/TotalBytes as far as the log tells. Percent never
// decreases over one task and is 100 only once the migration ended well.
//
// A container's migration copies its local volumes with dd, whose lines give the
// bytes copied but not the volume's size until its copy ends: TotalBytes counts
// the volumes whose copy ended, TransferredBytes those and the one being copied,
// and Percent stays 0 until the migration ended well.
type Progress struct {
	Percent          float64 // 0..100, one decimal
	TransferredBytes int64
	TotalBytes       int64
	BytesPerSecond   int64
	Phase            string // one of the Phase constants
	// DowntimeSeconds is, for a container's restart migration, how long it has
	// been down: from PVE's "shutdown CT" line to the log's last line (its end
	// once it ended: the start on the target, or on the source after a
	// failure). Nil for a migration that shut nothing down.
	DowntimeSeconds *int64 `json:",omitempty"`
}

// progressParser reads a migration task's log line by line (lines arrive in order,
// possibly over several reads of a running task) and keeps what they say: the
// progress and the line that best explains a failure. The zero value is ready to use.
type progressParser struct {
	// memoryHint is the VM's memory size, used as the size of the VM state before
	// PVE logs it, so that a disk phase does not claim the whole migration and a
	// live migration has a total from its first answer on.
	memoryHint int64

	phase          string
	disks          map[string]diskCopy // by drive name (scsi0, ...)
	diskOrder      []string
	memDone        int64 // VM state transferred (may exceed memTotal: dirty pages are resent)
	memTotal       int64
	rate           int64
	percent        float64 // the highest percent reported so far
	seenMigration  bool    // any migration line at all: progress is meaningful
	succeeded      bool
	failed         bool
	abortReason    string // from "migration aborted (duration ...): <reason>"
	statusError    string // from "migration status error: failed - <desc>"
	firstError     string // the first "ERROR: ..." line
	taskError      string // from "TASK ERROR: <msg>"
	lastPlainError string // last line mentioning an error, when nothing better is found
	target         string // the target node, as the log names it

	// A container's migration.
	container   bool
	shutdownAt  time.Time // the "shutdown CT" line's stamp; zero when it shut nothing down
	lastStamp   time.Time // the last stamped line's
	volsDone    int64     // bytes of the local volumes whose copy ended
	volCopying  int64     // bytes of the volume being copied, as dd said last
	volFinished bool      // dd's summary of the current volume was seen
}

// diskCopy is one local disk's mirror job.
type diskCopy struct {
	done, total int64
}

// Units PVE's render_bytes uses (1024-based).
var byteUnits = map[string]float64{
	"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50,
}

const unitRe = `(B|KiB|MiB|GiB|TiB|PiB)`

var (
	// "2025-01-04 00:34:30 " prefixes most migration lines; block-job lines have none.
	stampRe = regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} `)
	memRe   = regexp.MustCompile(`^migration (?:active|device), transferred ([0-9]+(?:\.[0-9]+)?) ` + unitRe +
		` of ([0-9]+(?:\.[0-9]+)?) ` + unitRe + ` VM-state, ([0-9]+(?:\.[0-9]+)?) ` + unitRe + `/s`)
	mirrorRe = regexp.MustCompile(`^(?:mirror|drive)-([A-Za-z0-9_]+): transferred ([0-9]+(?:\.[0-9]+)?) ` + unitRe +
		` of ([0-9]+(?:\.[0-9]+)?) ` + unitRe + ` \(([0-9]+(?:\.[0-9]+)?)%\)(?: in ((?:\d+[dhms] ?)+))?`)
	completedRe = regexp.MustCompile(`^migration completed, transferred ([0-9]+(?:\.[0-9]+)?) ` + unitRe + ` VM-state`)
	avgRe       = regexp.MustCompile(`^average migration speed: ([0-9]+(?:\.[0-9]+)?) ` + unitRe + `/s`)
	targetRe    = regexp.MustCompile(`^(?:starting migration of (?:VM|CT) \d+ to node '([^']+)'|Requesting HA migration for (?:VM|CT) \d+ to node (\S+))`)
	// dd's progress and summary lines: "8589934592 bytes (8.6 GB, 8.0 GiB) copied, 8.00231 s, 1.1 GB/s".
	ddRe       = regexp.MustCompile(`^([0-9]+) bytes (?:\([^)]*\) )?copied, ([0-9]+(?:\.[0-9]+)?) s, `)
	abortedRe  = regexp.MustCompile(`^migration aborted(?: \(duration [^)]*\))?(?::\s*(.*))?$`)
	durationRe = regexp.MustCompile(`(\d+)([dhms])`)
)

// maxBytes bounds parsed sizes so that sums cannot overflow (4 EiB is far beyond
// any VM; larger numbers in a log are nonsense).
const maxBytes = int64(1) << 62 / 8

// parseBytes turns "357.9" "MiB" into bytes, bounded by maxBytes.
func parseBytes(num, unit string) int64 {
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || v < 0 {
		return 0
	}
	b := v * byteUnits[unit]
	if b >= float64(maxBytes) || math.IsInf(b, 0) {
		return maxBytes
	}
	return int64(b)
}

// parseDuration reads PVE's render_duration text ("1m 1s", "1h 2m 3s", "5s").
func parseDuration(s string) int64 {
	var secs int64
	for _, m := range durationRe.FindAllStringSubmatch(s, -1) {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > 1<<40 {
			return 0
		}
		switch m[2] {
		case "d":
			secs += n * 86400
		case "h":
			secs += n * 3600
		case "m":
			secs += n * 60
		case "s":
			secs += n
		}
	}
	return secs
}

// stampLayout is the layout of the stamp PVE's migrations put before a line
// (the node's local time: only differences of two stamps are used).
const stampLayout = "2006-01-02 15:04:05"

// stripStamp removes the timestamp and an "ERROR: " marker from a log line and says
// whether the marker was there.
func stripStamp(line string) (string, bool) {
	line, _ = cutStamp(line)
	if rest, ok := strings.CutPrefix(line, "ERROR: "); ok {
		return rest, true
	}
	return line, false
}

// cutStamp removes a line's timestamp and returns it (zero when it had none).
func cutStamp(line string) (string, time.Time) {
	line = strings.TrimRight(line, "\r\n")
	var at time.Time
	if loc := stampRe.FindStringIndex(line); loc != nil {
		at, _ = time.Parse(stampLayout, line[:loc[1]-1])
		line = line[loc[1]:]
	}
	return line, at
}

// Feed reads one log line.
func (p *progressParser) Feed(raw string) {
	if strings.HasPrefix(raw, "TASK ") {
		p.feedTaskLine(raw)
		return
	}
	line, at := cutStamp(raw)
	if !at.IsZero() {
		p.lastStamp = at
	}
	line, isError := strings.CutPrefix(line, "ERROR: ")
	if isError && p.firstError == "" && !strings.HasPrefix(line, "migration finished with problems") &&
		!strings.HasPrefix(line, "migration aborted") {
		p.firstError = line
	}
	switch {
	case strings.HasPrefix(line, "migration active, ") || strings.HasPrefix(line, "migration device, "):
		m := memRe.FindStringSubmatch(line)
		if m == nil {
			return
		}
		p.seenMigration = true
		p.setPhase(PhaseMemory)
		p.memDone = parseBytes(m[1], m[2])
		p.memTotal = parseBytes(m[3], m[4])
		p.rate = parseBytes(m[5], m[6])
	case strings.HasPrefix(line, "mirror-") || strings.HasPrefix(line, "drive-"):
		m := mirrorRe.FindStringSubmatch(line)
		if m == nil {
			return
		}
		p.seenMigration = true
		p.setPhase(PhaseDisk)
		if p.disks == nil {
			p.disks = map[string]diskCopy{}
		}
		if _, ok := p.disks[m[1]]; !ok {
			p.diskOrder = append(p.diskOrder, m[1])
		}
		d := diskCopy{done: parseBytes(m[2], m[3]), total: parseBytes(m[4], m[5])}
		if d.done > d.total {
			d.done = d.total
		}
		p.disks[m[1]] = d
		if secs := parseDuration(m[7]); secs > 0 {
			p.rate = d.done / secs
		}
	case strings.HasPrefix(line, "migration completed, "):
		p.seenMigration = true
		if m := completedRe.FindStringSubmatch(line); m != nil {
			p.memDone = parseBytes(m[1], m[2])
			if p.memTotal == 0 || p.memTotal < p.memDone {
				p.memTotal = p.memDone
			}
		}
		p.setPhase(PhaseCompleting)
	case strings.HasPrefix(line, "average migration speed: "):
		p.seenMigration = true
		if m := avgRe.FindStringSubmatch(line); m != nil {
			p.rate = parseBytes(m[1], m[2])
		}
		p.setPhase(PhaseCompleting)
	case line == "migration status: completed":
		p.seenMigration = true
		p.setPhase(PhaseCompleting)
	case strings.HasPrefix(line, "migration status error: "):
		if _, desc, ok := strings.Cut(line, " - "); ok && p.statusError == "" {
			p.statusError = desc
		} else if p.statusError == "" {
			p.statusError = strings.TrimPrefix(line, "migration status error: ")
		}
	case strings.HasPrefix(line, "migration finished successfully"):
		p.seenMigration = true
		p.succeeded = true
		p.setPhase(PhaseDone)
	case strings.HasPrefix(line, "migration aborted"):
		p.seenMigration = true
		p.failed = true
		if m := abortedRe.FindStringSubmatch(line); m != nil && m[1] != "" && p.abortReason == "" {
			p.abortReason = m[1]
		}
		p.setPhase(PhaseFailed)
	case strings.HasPrefix(line, "migration finished with problems"):
		p.seenMigration = true
		p.failed = true
		p.setPhase(PhaseFailed)
	case strings.HasPrefix(line, "starting migration of VM"):
		p.seenMigration = true
		p.setPhase(PhaseStarting)
		p.readTarget(line)
	case strings.HasPrefix(line, "shutdown CT "):
		// A restart migration: the container goes down here.
		p.seenMigration, p.container = true, true
		if p.shutdownAt.IsZero() {
			p.shutdownAt = at
		}
		p.setPhase(PhaseShutdown)
	case strings.HasPrefix(line, "starting migration of CT"):
		p.seenMigration, p.container = true, true
		p.setPhase(PhaseStarting)
		p.readTarget(line)
	case p.container && strings.HasPrefix(line, "found local volume "):
		p.setPhase(PhaseStorage)
	case p.container && ddRe.MatchString(line):
		p.feedDD(line)
	case p.container && strings.HasPrefix(line, "volume '") && strings.HasSuffix(line, "on the target"):
		// The current volume's copy ended: its size is what dd copied.
		p.volsDone += p.volCopying
		p.volCopying, p.volFinished = 0, false
	case p.container && (line == "start container on target node" || line == "start container on source node"):
		p.setPhase(PhaseStart)
	case strings.HasPrefix(line, "Requesting HA migration"):
		p.readTarget(line)
	case line == "starting storage migration", line == "copying local disk images",
		strings.HasPrefix(line, "found local disk "), strings.HasPrefix(line, "found local, replicated disk "):
		p.seenMigration = true
		p.setPhase(PhaseDisk)
	case line == "all 'mirror' jobs are ready", strings.HasPrefix(line, "switching mirror jobs"):
		p.seenMigration = true
		for name, d := range p.disks {
			d.done = d.total
			p.disks[name] = d
		}
	case strings.HasPrefix(line, "starting online/live migration"), strings.HasPrefix(line, "start migrate command"):
		p.seenMigration = true
		p.setPhase(PhaseMemory)
	default:
		if isError || strings.Contains(strings.ToLower(line), "error") {
			p.lastPlainError = line
		}
	}
}

// feedDD reads one of dd's lines while a container's volume is copied: a
// progress line (bytes so far) or a summary (the whole volume; PVE's export and
// import each print one).
func (p *progressParser) feedDD(line string) {
	m := ddRe.FindStringSubmatch(line)
	if m == nil {
		return
	}
	p.setPhase(PhaseStorage)
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n < 0 || n > maxBytes {
		return
	}
	if secs, err := strconv.ParseFloat(m[2], 64); err == nil && secs > 0 && !math.IsInf(secs, 0) {
		p.rate = int64(float64(n) / secs)
	}
	p.volCopying = max(p.volCopying, n)
}

func (p *progressParser) readTarget(line string) {
	if m := targetRe.FindStringSubmatch(line); m != nil && p.target == "" {
		p.target = m[1] + m[2]
	}
}

func (p *progressParser) feedTaskLine(line string) {
	switch {
	case line == "TASK OK" || strings.HasPrefix(line, "TASK WARNINGS"):
		if p.seenMigration && !p.failed {
			p.succeeded = true
			p.setPhase(PhaseDone)
		}
	case strings.HasPrefix(line, "TASK ERROR: "):
		p.taskError = strings.TrimPrefix(line, "TASK ERROR: ")
		p.failed = true
		if p.seenMigration {
			p.setPhase(PhaseFailed)
		}
	}
}

// setPhase moves the phase on. Phases only move forward: a late line of an earlier
// phase (PVE prints the final mirror status after the memory transfer began) does
// not send the phase back.
func (p *progressParser) setPhase(ph string) {
	if phaseRank(ph) >= phaseRank(p.phase) {
		p.phase = ph
	}
}

func phaseRank(ph string) int {
	switch ph {
	case PhaseStarting:
		return 10
	case PhaseShutdown: // before a container's "starting migration" line, which keeps it
		return 15
	case PhaseDisk, PhaseStorage:
		return 20
	case PhaseMemory:
		return 30
	case PhaseStart:
		return 35
	case PhaseCompleting:
		return 40
	case PhaseDone, PhaseFailed:
		return 50
	}
	return 0
}

// Progress returns the progress so far, or false when the log holds nothing of a
// migration (another task type, or a migration that has not logged yet).
func (p *progressParser) Progress() (Progress, bool) {
	if !p.seenMigration {
		return Progress{}, false
	}
	var diskDone, diskTotal int64
	for _, name := range p.diskOrder {
		d := p.disks[name]
		diskDone += d.done
		diskTotal += d.total
	}
	memTotal := p.memTotal
	if memTotal == 0 && phaseRank(p.phase) < phaseRank(PhaseCompleting) {
		// PVE has not said how much VM state there is yet; the VM's memory size
		// stands in (it weighs the disks against the state, and gives a client a
		// total from the first answer on).
		memTotal = p.memoryHint
	}
	memDone := min(p.memDone, memTotal)
	done, total := diskDone+memDone, diskTotal+memTotal
	var downtime *int64
	if p.container {
		// dd does not say a volume's size before its copy ends: no share of
		// a total is known, so the percent says nothing until the end.
		done, total = 0, 0
		diskDone, diskTotal = p.volsDone+p.volCopying, p.volsDone
		if !p.shutdownAt.IsZero() && !p.lastStamp.Before(p.shutdownAt) {
			d := int64(p.lastStamp.Sub(p.shutdownAt) / time.Second)
			downtime = &d
		}
	}
	pct := 0.0
	if total > 0 {
		pct = math.Floor(float64(done)/float64(total)*1000) / 10
	}
	// Until PVE says the migration finished, it has not: stay under 100.
	pct = min(pct, 99.9)
	if p.succeeded && !p.failed {
		pct = 100
	}
	if pct < p.percent {
		pct = p.percent
	}
	p.percent = pct
	phase := p.phase
	if phase == "" {
		phase = PhaseStarting
	}
	if p.container {
		total = diskTotal
	}
	return Progress{
		Percent:          pct,
		TransferredBytes: diskDone + p.memDone,
		TotalBytes:       total,
		BytesPerSecond:   p.rate,
		Phase:            phase,
		DowntimeSeconds:  downtime,
	}, true
}

// failureReason returns the line that best says why the task failed: the reason after
// "migration aborted", QEMU's migration error, the first ERROR line, or TASK ERROR's
// text, in that order. Empty when the log told nothing.
func (p *progressParser) failureReason() string {
	for _, s := range []string{p.abortReason, p.statusError, p.firstError, p.taskError, p.lastPlainError} {
		if s = strings.TrimSpace(s); s != "" {
			return s
		}
	}
	return ""
}

// ParseProgress reads a whole migration log and returns its progress; false when the
// log holds nothing of a migration. memoryHint (the VM's memory size, 0 if unknown)
// sizes the VM state while local disks are still being copied.
func ParseProgress(lines []string, memoryHint int64) (Progress, bool) {
	p := progressParser{memoryHint: memoryHint}
	for _, l := range lines {
		p.Feed(l)
	}
	return p.Progress()
}
