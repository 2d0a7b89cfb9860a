package pvesim

import (
	"strings"
	"time"
)

// task is a PVE worker: a UPID, a log, and the emulated work it does. All
// fields are guarded by Cluster.mu.
type task struct {
	upid    string
	node    string
	pid     int64
	pstart  int64
	start   time.Time
	typ     string
	id      string
	user    string
	lines   []string
	running bool
	end     time.Time
	exit    string
	done    chan struct{}

	holds   []*fileLock // locks the task holds
	waiting *lockWait   // the lock the task waits for, if any
	timers  []*event    // pending steps, cancelled when the task ends
	// interrupt replaces the default reaction to a kill (DELETE on the task).
	interrupt func(at time.Time)
	// onEnd runs after the task has ended (HA follow-ups, reboot's restart).
	onEnd []func(at time.Time)
}

// newTask starts a worker on node n; c.mu must be held.
func (c *Cluster) newTask(n *node, typ, id, user string, at time.Time) *task {
	pid := c.nextPID(n)
	t := &task{
		node: n.name,
		pid:  pid,
		// Clock ticks since boot; PVE's UPID allows at most 9 hex digits,
		// which long runs at a huge speed would overflow.
		pstart:  int64(at.Sub(n.boot)/(10*time.Millisecond)) % (1 << 36),
		start:   at,
		typ:     typ,
		id:      id,
		user:    user,
		running: true,
		done:    make(chan struct{}),
	}
	t.upid = encodeUPID(upidInfo{node: n.name, pid: t.pid, pstart: t.pstart, starttime: at.Unix(), typ: typ, id: id, user: user})
	c.tasks[t.upid] = t
	n.active = append(n.active, t)
	if isMigration(typ) {
		c.journal.migrations++
		c.journal.peakMigrations = max(c.journal.peakMigrations, c.journal.migrations)
	}
	return t
}

// haTask starts a task on behalf of the HA resource agent (user root@pam).
func (c *Cluster) haTask(n *node, typ, id string, at time.Time) *task {
	t := c.newTask(n, typ, id, "root@pam", at)
	t.log("task started by HA resource agent")
	return t
}

func (t *task) log(line string) { t.lines = append(t.lines, line) }

// logAt writes a line with the "%F %H:%M:%S " prefix migration logs carry.
func (c *Cluster) logAt(t *task, at time.Time, line string) {
	t.log(logTime(at.In(c.loc)) + " " + line)
}

// logErrAt writes an error-level migration line ("... ERROR: msg").
func (c *Cluster) logErrAt(t *task, at time.Time, line string) {
	t.log(logTime(at.In(c.loc)) + " ERROR: " + line)
}

// after schedules a step of a running task; the step runs with c.mu held and
// only while the task still runs. c.mu must be held by the caller.
func (c *Cluster) after(t *task, at time.Time, d time.Duration, step func(at time.Time)) *event {
	e := c.clock.At(at.Add(d), func(at time.Time) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !t.running {
			return
		}
		step(at)
	})
	t.timers = append(t.timers, e)
	return e
}

// cancelSteps drops a running task's pending steps, for a worker that
// changes course (a migration's cleanup after a failure); c.mu must be held.
func (c *Cluster) cancelSteps(t *task) {
	for _, e := range t.timers {
		c.clock.Cancel(e)
	}
	t.timers = nil
}

// later schedules cluster work not tied to a running task.
func (c *Cluster) later(at time.Time, d time.Duration, fn func(at time.Time)) *event {
	return c.clock.At(at.Add(d), func(at time.Time) {
		c.mu.Lock()
		defer c.mu.Unlock()
		fn(at)
	})
}

// finish ends a task: "" is success, anything else the error; c.mu must be held.
func (c *Cluster) finish(t *task, at time.Time, err string) {
	if !t.running {
		return
	}
	if err == "" {
		t.log("TASK OK")
		t.exit = "OK"
	} else {
		err = strings.ReplaceAll(strings.TrimRight(err, "\n"), "\n", " ")
		t.log("TASK ERROR: " + err)
		t.exit = err
	}
	c.end(t, at)
}

// endAbruptly is a worker dying with its node (a power-off): its log stops
// without a TASK line, so PVE reads its status as "unexpected status";
// c.mu must be held.
func (c *Cluster) endAbruptly(t *task, at time.Time) {
	if !t.running {
		return
	}
	t.exit = "unexpected status"
	c.end(t, at)
}

// end is what every ending of a task shares: its steps and locks go, it
// moves to its node's index, and whoever waits for it is told.
func (c *Cluster) end(t *task, at time.Time) {
	t.running = false
	t.end = at
	for _, e := range t.timers {
		c.clock.Cancel(e)
	}
	t.timers = nil
	if w := t.waiting; w != nil {
		w.lock.removeWaiter(w)
		c.clock.Cancel(w.timeout)
		t.waiting = nil
	}
	for len(t.holds) > 0 {
		c.release(t.holds[len(t.holds)-1], t, at)
	}
	n := c.nodes[t.node]
	for i, a := range n.active {
		if a == t {
			n.active = append(n.active[:i], n.active[i+1:]...)
			break
		}
	}
	n.archive = append(n.archive, t)
	if over := len(n.archive) - c.opts.MaxTasksPerNode; over > 0 {
		for _, old := range n.archive[:over] {
			delete(c.tasks, old.upid)
		}
		n.archive = append([]*task(nil), n.archive[over:]...)
	}
	if isMigration(t.typ) {
		c.journal.migrations--
	}
	close(t.done)
	for _, fn := range t.onEnd {
		fn(at)
	}
}

// kill is what a SIGTERM to the worker does (DELETE on the task, or
// overrule-shutdown); c.mu must be held.
func (c *Cluster) kill(t *task, at time.Time) {
	if !t.running {
		return
	}
	if w := t.waiting; w != nil {
		c.finish(t, at, "can't lock file '"+w.lock.path+"' - received interrupt")
		return
	}
	if t.interrupt != nil {
		t.interrupt(at)
		return
	}
	c.finish(t, at, "received interrupt")
}

func (t *task) snapshot() TaskState {
	return TaskState{
		UPID: t.upid, Node: t.node, Type: t.typ, ID: t.id, User: t.user,
		Running: t.running, ExitStatus: t.exit, Start: t.start, End: t.end,
		Log: append([]string(nil), t.lines...),
	}
}

// fileLock is a node-local flock such as /var/lock/qemu-server/lock-100.conf.
type fileLock struct {
	path    string
	holder  *task
	waiters []*lockWait
}

type lockWait struct {
	lock    *fileLock
	task    *task
	timeout *event
	then    func(at time.Time)
}

func (l *fileLock) removeWaiter(w *lockWait) {
	for i, x := range l.waiters {
		if x == w {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			return
		}
	}
}

// configLock is the VM's config flock on a node.
func (c *Cluster) configLock(node string, vmid int) *fileLock {
	return c.fileLock(node, "/var/lock/qemu-server/lock-"+itoa(vmid)+".conf")
}

// migrateLock is the guest migration lock on a node.
func (c *Cluster) migrateLock(node string, vmid int) *fileLock {
	return c.fileLock(node, "/var/lock/pve-manager/pve-migrate-"+itoa(vmid))
}

func (c *Cluster) fileLock(node, path string) *fileLock {
	key := node + ":" + path
	l, ok := c.locks[key]
	if !ok {
		l = &fileLock{path: path}
		c.locks[key] = l
	}
	return l
}

// acquire takes a lock for a task with PVE's 10 s timeout, then runs then.
// While waiting the log says "trying to acquire lock..."; a timeout calls
// onFail with "can't lock file '<path>' - got timeout" (nil: the task ends
// with that error). c.mu must be held.
func (c *Cluster) acquire(t *task, l *fileLock, at time.Time, then func(at time.Time), onFail func(at time.Time, err string)) {
	if onFail == nil {
		onFail = func(at time.Time, err string) { c.finish(t, at, err) }
	}
	if l.holder == nil || l.holder == t {
		if l.holder == nil {
			l.holder = t
			t.holds = append(t.holds, l)
		}
		then(at)
		return
	}
	t.log("trying to acquire lock...")
	w := &lockWait{lock: l, task: t, then: then}
	l.waiters = append(l.waiters, w)
	t.waiting = w
	w.timeout = c.clock.At(at.Add(lockTimeout), func(at time.Time) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.waiting != w {
			return
		}
		l.removeWaiter(w)
		t.waiting = nil
		onFail(at, "can't lock file '"+l.path+"' - got timeout")
	})
}

// release gives a lock up and hands it to the next waiter; c.mu must be held.
func (c *Cluster) release(l *fileLock, t *task, at time.Time) {
	for i, h := range t.holds {
		if h == l {
			t.holds = append(t.holds[:i], t.holds[i+1:]...)
			break
		}
	}
	if l.holder != t {
		return
	}
	l.holder = nil
	for len(l.waiters) > 0 {
		w := l.waiters[0]
		l.waiters = l.waiters[1:]
		c.clock.Cancel(w.timeout)
		if !w.task.running || w.task.waiting != w {
			continue
		}
		w.task.waiting = nil
		l.holder = w.task
		w.task.holds = append(w.task.holds, l)
		w.task.log(" OK")
		w.then(at)
		return
	}
}
