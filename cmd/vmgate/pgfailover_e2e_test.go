package main

// Issue 25 on the real binary: two vmgate replicas keep working through a
// PostgreSQL failover — the primary stopped hard, a streaming standby promoted
// at another address.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
)

// pgBin is where Debian's PostgreSQL 15 keeps its server programs (.ci/run's
// machine has them with the server the other tests use on 5432).
const pgBin = "/usr/lib/postgresql/15/bin"

// pgPair is a primary and a streaming standby of its own, in a temporary
// directory, on free ports: never the server on 5432.
type pgPair struct {
	t                *testing.T
	dir              string
	primary, standby string // data directories
	pPort, sPort     string
	asRoot           bool // run the tools as the postgres user (they refuse root)
}

// pgTool runs one of PostgreSQL's programs as the user that owns the clusters.
func (p *pgPair) pgTool(name string, args ...string) *exec.Cmd {
	path := filepath.Join(pgBin, name)
	if p.asRoot {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// run runs a program and fails the test with its output if it fails.
func (p *pgPair) run(name string, args ...string) {
	p.t.Helper()
	if out, err := p.pgTool(name, args...).CombinedOutput(); err != nil {
		p.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// startPGPair makes the primary (synchronous replication: a commit is
// acknowledged once the standby has it, so a promotion loses nothing), takes a
// base backup of it for the standby (-R: it follows the primary) and starts
// both. Everything is stopped and removed when the test ends, however it ends.
func startPGPair(t *testing.T) *pgPair {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBin, "pg_ctl")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL 15's programs are missing (%v): CI must run the failover test", err)
		}
		t.Skipf("PostgreSQL 15's programs are missing: %v", err)
	}
	dir, err := os.MkdirTemp("", "vmgate-pgfailover-")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgPair{t: t, dir: dir, primary: filepath.Join(dir, "primary"), standby: filepath.Join(dir, "standby"),
		asRoot: os.Geteuid() == 0}
	t.Cleanup(func() {
		for _, d := range []string{p.primary, p.standby} {
			if _, err := os.Stat(filepath.Join(d, "postmaster.pid")); err == nil {
				p.pgTool("pg_ctl", "stop", "-D", d, "-m", "immediate", "-w").Run()
			}
		}
		os.RemoveAll(dir)
	})
	if p.asRoot {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the clusters need the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	p.pPort, p.sPort = portOf(t, freePort(t)), portOf(t, freePort(t))
	p.run("initdb", "-D", p.primary, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	p.appendConf(p.primary, "port = "+p.pPort, "listen_addresses = '127.0.0.1'", "unix_socket_directories = '"+dir+"'",
		"wal_level = replica", "max_wal_senders = 4", "hot_standby = on", "fsync = off",
		"synchronous_standby_names = '*'", "synchronous_commit = on", "max_connections = 60")
	p.run("pg_ctl", "start", "-D", p.primary, "-l", filepath.Join(dir, "primary.log"), "-w", "-t", "60")
	p.run("pg_basebackup", "-h", "127.0.0.1", "-p", p.pPort, "-U", "postgres", "-D", p.standby, "-R", "-X", "stream",
		"--no-sync")
	// The standby's configuration is the primary's copy: its own port, and no
	// synchronous standby of its own once promoted (commits would wait forever).
	p.appendConf(p.standby, "port = "+p.sPort, "synchronous_standby_names = ''")
	p.run("pg_ctl", "start", "-D", p.standby, "-l", filepath.Join(dir, "standby.log"), "-w", "-t", "60")
	p.run("psql", "-h", "127.0.0.1", "-p", p.pPort, "-U", "postgres", "-q", "-c", "CREATE DATABASE vmgate")
	testkit.Eventually(t, "the standby streaming synchronously", func() error {
		var state, sync string
		err := p.db(p.pPort).QueryRowContext(t.Context(),
			`SELECT state, sync_state FROM pg_stat_replication LIMIT 1`).Scan(&state, &sync)
		if err == nil && (state != "streaming" || sync != "sync") {
			err = fmt.Errorf("replication %s, %s", state, sync)
		}
		return err
	})
	return p
}

// appendConf adds lines to a data directory's postgresql.conf.
func (p *pgPair) appendConf(dataDir string, lines ...string) {
	p.t.Helper()
	f, err := os.OpenFile(filepath.Join(dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.WriteString(f, "\n"+strings.Join(lines, "\n")+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// dsn is the multi-host connection string vmgate is given: both hosts, the one
// that takes writes wins.
func (p *pgPair) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%s,127.0.0.1:%s/vmgate?sslmode=disable&target_session_attrs=read-write",
		p.pPort, p.sPort)
}

// db is a connection to the vmgate database on one host, closed with the test.
func (p *pgPair) db(port string) *sql.DB {
	p.t.Helper()
	db, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%s/vmgate?sslmode=disable", port))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { db.Close() })
	return db
}

// portOf is the port of a host:port.
func portOf(t *testing.T, addr string) string {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		t.Fatalf("no port in %q", addr)
	}
	return addr[i+1:]
}

// failoverHeld is how long TestPostgresFailover leaves the replicas without a
// writable host before it promotes the standby.
const failoverHeld = 25 * time.Second

// TestPostgresFailover (issue 25): two `vmgate server` replicas on a primary and
// a streaming standby, named together in a multi-host DSN with
// target_session_attrs=read-write. An evacuation (an operation on many VMs,
// driven by A) and a migration followed by `vmgate vm migrate` (through B) run
// while the primary is stopped hard and, failoverHeld later, the standby
// promoted. Checked: while no host takes writes a write answers 503 store_unavailable with Retry-After within
// the store's deadline and /readyz fails; writes resume after the promotion (the
// time is measured and printed, the bound asserted is generous); nothing is lost
// or doubled (each item started once, each VM moved once, every task row has its
// UPID, the audit chain verifies, no lease taken over); a logout on A is honoured
// by B, whose feed poll is an hour away (its listener followed the new primary);
// the metrics name the new host and count the failover.
func TestPostgresFailover(t *testing.T) {
	t.Parallel()
	pg := startPGPair(t)
	dsn := pg.dsn()

	sim := pvesim.DevCluster(pvesim.Options{Speed: frozen})
	vmids := []int{100, 101}
	for id := 300; id < 304; id++ {
		if err := sim.AddVM(pvesim.VMSpec{VMID: id, Node: "pve1", Running: true, MemBytes: 2 << 30,
			Disks: []pvesim.Disk{{Name: "scsi0", Volid: fmt.Sprintf("ceph:vm-%d-disk-0", id), Size: 8 << 30}}}); err != nil {
			t.Fatal(err)
		}
		vmids = append(vmids, id)
	}
	simCtx, cancelSim := context.WithCancel(context.Background())
	simSrv, err := sim.Serve(simCtx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		cancelSim()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancelSim(); simSrv.Close() })
	ep := simSrv.Endpoints()[0]

	create := exec.Command(binary, "admin", "--database", dsn, "user", "create", "--email", "root@example.com", "--role", "admin",
		"--password-stdin")
	create.Stdin = strings.NewReader(replicaPassword + "\n")
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("admin user create: %v\n%s", err, out)
	}
	key := filepath.Join(t.TempDir(), "vmgate.key")
	const storeTimeout = 3 * time.Second
	args := []string{"server", "--database", dsn, "--secret-key-file", key, "--listen", "127.0.0.1:0", "--trusted-proxies", "127.0.0.1",
		"--log-format", "json"}
	env := []string{"VMGATE_STORE_TIMEOUT=" + storeTimeout.String()}
	srvB := start(t, append(env, "VMGATE_FEED_POLL=1h"), args...)
	b := srvB.line(t, listening)[1]
	srvA := start(t, env, args...)
	a := srvA.line(t, listening)[1]
	r := &replicas{t: t, a: a, b: b}

	root := r.login("root@example.com", replicaPassword)
	tokenID, secret, _ := strings.Cut(sim.DevToken(), "=")
	cl, err := root.RegisterCluster(t.Context(), client.ClusterCreate{Name: "lab", Endpoints: []string{ep.URL},
		TokenID: tokenID, TokenSecret: secret, TLSFingerprint: ep.Fingerprint})
	r.must("register the cluster", err)
	ann := r.login("root@example.com", replicaPassword) // logged out on A after the failover
	r.eventually("B knows the cluster and ann's session", func() error {
		return get(r.onB(ann), fmt.Sprintf("/api/v1/clusters/%d", cl.ID), http.StatusOK)
	})

	// The bulk action, driven by A: pve1's six VMs, two at a time. The
	// emulator's time stands (nearly) still, so it is surely running through
	// the failover.
	evac, err := root.Evacuate(t.Context(), cl.ID, "pve1", client.EvacuateRequest{MaxParallel: 2, Type: "qemu"})
	r.must("evacuate pve1", err)
	r.eventually("two of the evacuation's migrations at PVE", func() error {
		op, err := root.Operation(t.Context(), evac.OperationID)
		if err != nil {
			return err
		}
		running := 0
		for _, it := range op.Items {
			if it.State == "running" && it.TaskID != nil {
				running++
			}
		}
		if running != 2 {
			return fmt.Errorf("operation %+v", op.Counts)
		}
		return nil
	})
	// The followed migration, through B: VM 104 from pve3 to pve2.
	cliEnvB := cliEnv(t)
	runCLI(t, cliEnvB, replicaPassword+"\n", "login", "--server", b, "--email", "root@example.com").want(t, 0, "login on B")
	mig := startCLI(t, cliEnvB, "vm", "migrate", strconv.FormatInt(cl.ID, 10), "pve3", "104", "--target", "pve2")
	mig.waitStderr(t, "VM 104 → pve2: ")

	// The primary dies.
	pg.run("pg_ctl", "stop", "-D", pg.primary, "-m", "immediate", "-w")
	stopped := time.Now()
	t.Logf("primary stopped (immediate)")

	// No host takes writes: /readyz fails, and a write answers 503
	// store_unavailable with Retry-After within the store's deadline.
	readyz := func(base string) int {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	r.eventually("A's /readyz failing", func() error {
		if s := readyz(a); s != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d", s)
		}
		return nil
	})
	probe := 0
	write := func(c *client.Client) (time.Duration, error) {
		probe++
		began := time.Now()
		_, err := c.CreateUser(context.Background(), client.UserCreate{Email: fmt.Sprintf("probe%d@example.com", probe),
			Nickname: "probe", Password: replicaPassword, Role: "user"})
		return time.Since(began), err
	}
	took, err := write(root)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Reason != "store_unavailable" || ae.RetryAfter <= 0 {
		t.Errorf("a write while no host takes writes: %v, want 503 store_unavailable with Retry-After", err)
	}
	// Never hangs: a generous bound (the password's hash and a busy machine come
	// on top of the store's deadline); the time itself is printed below.
	if took > storeTimeout+15*time.Second {
		t.Errorf("a write while no host takes writes answered after %v; the store's deadline is %v", took, storeTimeout)
	}
	t.Logf("meanwhile a write on A answered %v in %v (Retry-After %v)", err, took.Round(time.Millisecond), ae.RetryAfter)
	_, meErr := root.Me(context.Background())
	_, vmsErr := root.VMs(context.Background(), cl.ID, client.GuestFilter{})
	t.Logf("meanwhile reads on A: /user/me %v; the VM list %v", errText(meErr), errText(vmsErr))
	if vmsErr != nil {
		t.Errorf("the VM list (served from memory) failed during the failover: %v", vmsErr)
	}

	// The failover lasts failoverHeld before the promotion: longer than a third
	// of the operation's lease (20 s), so the driver's renewal fails at least
	// once meanwhile, and its lease must outlast it (decision 0118). Writes and
	// /readyz are probed every half second meanwhile: none may hang.
	slowest, probes := took, 1
	pace := time.NewTicker(500 * time.Millisecond)
	for time.Since(stopped) < failoverHeld {
		<-pace.C
		took, err := write(root)
		probes++
		slowest = max(slowest, took)
		if status(err) != http.StatusServiceUnavailable || took > storeTimeout+15*time.Second {
			t.Errorf("a write %v into the failover: %v after %v, want 503 within the store's deadline",
				time.Since(stopped).Round(time.Second), err, took)
		}
		if s := readyz(a); s != http.StatusServiceUnavailable {
			t.Errorf("A's /readyz %v into the failover: %d, want 503", time.Since(stopped).Round(time.Second), s)
		}
	}
	pace.Stop()
	t.Logf("meanwhile %d writes on A answered 503, the slowest in %v", probes, slowest.Round(time.Millisecond))

	// The standby is promoted; writes resume.
	pg.run("pg_ctl", "promote", "-D", pg.standby, "-w", "-t", "60")
	promoted := time.Now()
	var refusedMeanwhile []string
	var resumed time.Duration
	testkit.Eventually(t, "a write on A after the promotion", func() error {
		_, err := write(root)
		if err != nil {
			refusedMeanwhile = append(refusedMeanwhile, fmt.Sprint(status(err)))
			return err
		}
		resumed = time.Since(promoted)
		return nil
	})
	meanwhile := strings.Join(refusedMeanwhile, ",")
	if meanwhile == "" {
		meanwhile = "nothing: the first write after it succeeded"
	}
	t.Logf("MEASURED: promotion → first successful write on A: %v (the primary stopped %v before the promotion; "+
		"writes after the promotion answered %s)", resumed.Round(time.Millisecond), promoted.Sub(stopped).Round(time.Millisecond),
		meanwhile)
	if resumed > 30*time.Second {
		t.Errorf("writes resumed %v after the promotion; the bound is 30 s (the issue's goal is 15 s)", resumed)
	}
	r.eventually("A's /readyz again", func() error {
		if s := readyz(a); s != http.StatusOK {
			return fmt.Errorf("/readyz %d", s)
		}
		return nil
	})
	r.eventually("B's /readyz again", func() error {
		if s := readyz(b); s != http.StatusOK {
			return fmt.Errorf("/readyz %d", s)
		}
		return nil
	})

	// A logout on A is honoured by B: B's poll is an hour away, so its listener
	// followed the new primary.
	r.eventually("ann's logout on A", func() error {
		if err := ann.Logout(context.Background()); err != nil && status(err) != http.StatusUnauthorized {
			return err // 401: a try whose answer was lost did log out
		}
		return nil
	})
	r.eventually("the logout made on A after the failover, in force on B",
		func() error { return get(r.onB(ann), "/api/v1/user/me", http.StatusUnauthorized) })

	standby := `"host":"127.0.0.1:` + pg.sPort + `"`
	for name, p := range map[string]*proc{"A": srvA, "B": srvB} {
		r.eventually(name+"'s change feed listening on the new primary", func() error {
			for _, l := range strings.Split(p.log(), "\n") {
				if strings.Contains(l, "change feed: listening again") && strings.Contains(l, standby) {
					return nil
				}
			}
			return errors.New("no \"listening again\" on the standby's address in the log")
		})
	}

	// The actions finish, each once.
	sim.SetSpeed(50)
	code := mig.wait(t)
	out, errOut := mig.outputs()
	if code != 0 || !strings.Contains(lastLine(out), "VM 104 migrated to pve2") {
		t.Errorf("the followed migration: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var op client.Operation
	r.eventually("the evacuation's end", func() error {
		var err error
		op, err = root.Operation(t.Context(), evac.OperationID)
		if err == nil && (op.Status == "planned" || op.Status == "running") {
			err = fmt.Errorf("operation %s %+v", op.Status, op.Counts)
		}
		return err
	})
	if op.Status != "done" || op.Counts.OK != len(vmids) {
		t.Errorf("the evacuation ended %s %+v, want done with %d ok", op.Status, op.Counts, len(vmids))
	}
	for _, id := range append(vmids, 104) {
		n := 0
		for _, task := range sim.TasksFor(id) {
			if task.Type == "qmigrate" {
				n++
			}
		}
		if st, _ := sim.VM(id); n != 1 || st.Node == "pve1" || (id == 104 && st.Node != "pve2") {
			t.Errorf("VM %d: %d migrations at PVE, now on %s", id, n, st.Node)
		}
	}
	if n := sim.Requests("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != len(vmids)+1 {
		t.Errorf("PVE received %d migrate POSTs for %d VMs", n, len(vmids)+1)
	}
	db := pg.db(pg.sPort)
	var noUPID, tasks int
	if err := db.QueryRowContext(t.Context(),
		`SELECT count(*) FILTER (WHERE upid IS NULL OR upid = ''), count(*) FROM tasks`).Scan(&noUPID, &tasks); err != nil {
		t.Fatal(err)
	}
	if noUPID != 0 || tasks != len(vmids)+1 {
		t.Errorf("task rows: %d, %d without a UPID; want %d, each with one", tasks, noUPID, len(vmids)+1)
	}
	verify := exec.Command(binary, "admin", "--database", dsn, "--secret-key-file", key, "audit", "verify")
	if out, err := verify.CombinedOutput(); err != nil {
		t.Errorf("vmgate admin audit verify: %v\n%s", err, out)
	}
	for name, p := range map[string]*proc{"A": srvA, "B": srvB} {
		if log := p.log(); strings.Contains(log, "took over an operation") || strings.Contains(log, "lost an idempotency key") {
			t.Errorf("replica %s took a lease over or lost one:\n%s", name, log)
		}
	}

	// The metrics name the standby's address and count the failover.
	resp, err := http.Get(a + "/metrics")
	r.must("A's metrics", err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	writerLine := regexp.MustCompile(`(?m)^vmgate_store_writer\{host="([^"]+)"\} 1$`).FindSubmatch(body)
	failovers := regexp.MustCompile(`(?m)^vmgate_store_failovers_total (\d+)$`).FindSubmatch(body)
	if writerLine == nil || string(writerLine[1]) != "127.0.0.1:"+pg.sPort || failovers == nil || string(failovers[1]) == "0" {
		t.Errorf("A's metrics after the failover: writer %q, failovers %q; want 127.0.0.1:%s and at least 1",
			writerLine, failovers, pg.sPort)
	}
}

// errText is err's text, "ok" for nil.
func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
