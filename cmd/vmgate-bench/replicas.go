package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for the replica measurement's schema
)

// replicaChanges are the changes of issue 8 (docs/history.md) whose propagation the replica
// measurement times, one kind per trial in turn.
var replicaChanges = []string{"logout", "refresh reuse", "user disabled", "user deleted", "password changed",
	"grant removed", "cluster updated", "cluster deleted"}

// replicaBench is the state of the replica measurement: replicas A and B, an admin
// on A, a cluster for the grant trials.
type replicaBench struct {
	b         *bench
	a, bb     string // base URLs of A and B
	root      string // the admin's token
	clusterID int64
	addrs     *sourceAddrs
	logins    *http.Client // a new source address per connection: no login limit answers
	users     int
}

// call makes one request on base as token and decodes data into out (if not nil).
func (r *replicaBench) call(ctx context.Context, base, token, method, path string, in, out any) error {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	var body string
	if in != nil {
		raw, _ := json.Marshal(in)
		body = string(raw)
		h.Set("Content-Type", "application/json")
	}
	raw, err := target{client: r.b.toVmgate, method: method, url: base + path, body: body, header: h}.fetch(ctx)
	if err != nil {
		return err
	}
	if out != nil {
		var env struct {
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(raw, &env); err != nil {
			return err
		}
		return json.Unmarshal(env.Data, out)
	}
	return nil
}

// is reports whether base answers path as token with want.
func (r *replicaBench) is(ctx context.Context, base, token, path string, want int) bool {
	h := http.Header{"Authorization": {"Bearer " + token}}
	return target{client: r.b.toVmgate, method: "GET", url: base + path, header: h, want: want}.do(ctx, 0) == nil
}

// newUser creates a user with a viewer grant on the cluster and returns its id,
// e-mail and password.
func (r *replicaBench) newUser(ctx context.Context) (int64, string, string, error) {
	r.users++
	email, pass := fmt.Sprintf("replica%d@bench.example", r.users), randomPassword()
	var u struct{ ID int64 }
	if err := r.call(ctx, r.a, r.root, "POST", "/api/v1/users", map[string]string{"email": email, "nickname": "r",
		"password": pass, "role": "user"}, &u); err != nil {
		return 0, "", "", err
	}
	if err := r.call(ctx, r.a, r.root, "PUT", fmt.Sprintf("/api/v1/clusters/%d/grants/%d", r.clusterID, u.ID),
		map[string]string{"role": "viewer"}, nil); err != nil {
		return 0, "", "", err
	}
	return u.ID, email, pass, nil
}

func (r *replicaBench) login(ctx context.Context, email, pass string) (string, error) {
	return loginWith(ctx, r.logins, r.a, email, pass)
}

// trial prepares one change, makes it on A once B shows the state before it, and
// returns how long after A's answer B showed the change.
func (r *replicaBench) trial(ctx context.Context, kind string) (time.Duration, error) {
	const limit = 5 * time.Second
	var (
		before, after func() bool // B's state before and after the change
		change        func() error
	)
	vm := fmt.Sprintf("/api/v1/pve/vm/%d/pve1/100", r.clusterID)
	switch kind {
	case "logout", "refresh reuse", "user disabled", "user deleted", "password changed", "grant removed":
		id, email, pass, err := r.newUser(ctx)
		if err != nil {
			return 0, err
		}
		tok, err := r.login(ctx, email, pass)
		if err != nil {
			return 0, err
		}
		watched, gone := tok, http.StatusUnauthorized // the token B must refuse, and how
		switch kind {
		case "logout":
			change = func() error { return r.call(ctx, r.a, tok, "POST", "/api/v1/user/logout", nil, nil) }
		case "refresh reuse":
			t0 := tok
			for range 2 {
				var next struct{ Token string }
				if err := r.call(ctx, r.a, tok, "POST", "/api/v1/user/refresh", nil, &next); err != nil {
					return 0, err
				}
				tok = next.Token
			}
			watched = tok
			change = func() error {
				err := r.call(ctx, r.a, t0, "POST", "/api/v1/user/refresh", nil, nil)
				if err == nil || !strings.Contains(err.Error(), "401") {
					return fmt.Errorf("replaying a rotated token: %v, want 401", err)
				}
				return nil
			}
		case "user disabled":
			change = func() error {
				return r.call(ctx, r.a, r.root, "PATCH", fmt.Sprintf("/api/v1/users/%d", id), map[string]bool{"disabled": true}, nil)
			}
		case "user deleted":
			change = func() error { return r.call(ctx, r.a, r.root, "DELETE", fmt.Sprintf("/api/v1/users/%d", id), nil, nil) }
		case "password changed":
			other, err := r.login(ctx, email, pass)
			if err != nil {
				return 0, err
			}
			change = func() error {
				return r.call(ctx, r.a, tok, "POST", "/api/v1/user/password", map[string]string{"currentPassword": pass,
					"newPassword": randomPassword()}, nil)
			}
			watched = other
		case "grant removed":
			gone = http.StatusNotFound
			change = func() error {
				return r.call(ctx, r.a, r.root, "DELETE", fmt.Sprintf("/api/v1/clusters/%d/grants/%d", r.clusterID, id), nil, nil)
			}
		}
		before = func() bool { return r.is(ctx, r.bb, watched, vm, http.StatusOK) }
		after = func() bool { return r.is(ctx, r.bb, watched, vm, gone) }
	case "cluster updated":
		name := "renamed-" + hex.EncodeToString(randomBytes(4))
		path := fmt.Sprintf("/api/v1/clusters/%d", r.clusterID)
		named := func() bool {
			var c struct{ Name string }
			return r.call(ctx, r.bb, r.root, "GET", path, nil, &c) == nil && c.Name == name
		}
		before = func() bool { return !named() }
		change = func() error { return r.call(ctx, r.a, r.root, "PATCH", path, map[string]string{"name": name}, nil) }
		after = named
	case "cluster deleted":
		id, err := r.b.registerClusterOn(ctx, r.a, r.root, "gone-"+hex.EncodeToString(randomBytes(4)), r.b.small)
		if err != nil {
			return 0, err
		}
		path := fmt.Sprintf("/api/v1/pve/vm/%d/pve1/100", id)
		before = func() bool { return r.is(ctx, r.bb, r.root, path, http.StatusOK) }
		change = func() error {
			return r.call(ctx, r.a, r.root, "DELETE", fmt.Sprintf("/api/v1/clusters/%d", id), nil, nil)
		}
		after = func() bool { return r.is(ctx, r.bb, r.root, path, http.StatusNotFound) }
	default:
		return 0, fmt.Errorf("unknown change %q", kind)
	}
	if err := pollUntil(ctx, limit, time.Millisecond, before); err != nil {
		return 0, fmt.Errorf("%s: B never showed the state before the change: %w", kind, err)
	}
	if err := change(); err != nil {
		return 0, fmt.Errorf("%s on A: %w", kind, err)
	}
	t0 := time.Now()
	if err := pollUntil(ctx, limit, time.Millisecond, after); err != nil {
		return limit, nil // counted as not honoured
	}
	return time.Since(t0), nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// measureReplica: two vmgate processes on one PostgreSQL (a fresh schema, dropped
// at the end). Each trial makes one of the changes of issue 8 (docs/history.md) on A — logout, refresh
// reuse, user disabled, user deleted, password changed, grant removed, cluster
// updated, cluster deleted, in turn — after B showed the state before it, and polls
// B every millisecond until it shows the change; the delay counts from A's answer.
func (b *bench) measureReplica(ctx context.Context) error {
	if b.cfg.postgres == "" {
		g := b.goal("replica.change")
		g.state, g.detail = stateSkip, "skipped: give -postgres DSN to measure it"
		b.printf("  skipped: no -postgres DSN\n")
		return nil
	}
	db, err := sql.Open("pgx", b.cfg.postgres)
	if err != nil {
		return err
	}
	defer db.Close()
	schema := "vmgate_bench_" + hex.EncodeToString(randomBytes(6))
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	defer func() {
		if _, err := db.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			b.printf("  could not drop schema %s: %v\n", schema, err)
		}
	}()
	u, err := url.Parse(b.cfg.postgres)
	if err != nil {
		return fmt.Errorf("-postgres is not a URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()

	email, pass := "root@bench.example", randomPassword()
	if _, err := b.procs.run(ctx, "admin user create (postgres)", b.bin, []string{"admin", "--database", dsn, "user", "create",
		"--email", email, "--role", "admin", "--password-stdin"}, nil, pass+"\n"); err != nil {
		return err
	}
	key := filepath.Join(b.tmp, "replicas.key")
	var reps [2]*vmgateProc
	for i, name := range []string{"vmgate-A", "vmgate-B"} {
		if reps[i], err = b.startVmgate(ctx, name, []string{"server", "--listen", "127.0.0.1:0", "--database", dsn, "--secret-key-file", key}); err != nil {
			return err
		}
		defer b.procs.stop(reps[i].proc, 10*time.Second) // before the schema is dropped
	}
	r := &replicaBench{b: b, a: reps[0].base, bb: reps[1].base, addrs: &sourceAddrs{octet: 79}}
	r.logins = newClient(nil, dialFrom(r.addrs.get), false)
	if r.root, err = r.login(ctx, email, pass); err != nil {
		return err
	}
	if r.clusterID, err = b.registerClusterOn(ctx, r.a, r.root, "replicas", b.small); err != nil {
		return err
	}
	b.printf("replicas A (pid %d) and B (pid %d) on PostgreSQL schema %s; %d trials of: %s\n", reps[0].proc.pid(),
		reps[1].proc.pid(), schema, b.cfg.replicaTrials, strings.Join(replicaChanges, ", "))
	byKind := map[string][]time.Duration{}
	var delays []time.Duration
	missed := 0
	for i := 0; i < b.cfg.replicaTrials && ctx.Err() == nil; i++ {
		kind := replicaChanges[i%len(replicaChanges)]
		d, err := r.trial(ctx, kind)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i+1, err)
		}
		if d >= 5*time.Second {
			missed++
		}
		delays = append(delays, d)
		byKind[kind] = append(byKind[kind], d)
	}
	for _, k := range replicaChanges {
		if ds := byKind[k]; len(ds) > 0 {
			b.printf("  %-17s %3d trials: p50 %s  max %s\n", k, len(ds), ms(percentile(ds, 50)), ms(percentile(ds, 100)))
		}
	}
	p99 := percentile(delays, 99)
	b.printf("  all               %3d trials: p50 %s  p99 %s  max %s  (%d not in force within 5 s)\n",
		len(delays), ms(percentile(delays, 50)), ms(p99), ms(percentile(delays, 100)), missed)
	b.judge("replica.change", p99 <= 100*time.Millisecond && missed == 0 && len(delays) == b.cfg.replicaTrials, ms(p99),
		fmt.Sprintf("%d trials over %d kinds of change: p50 %s, p99 %s, max %s", len(delays), len(replicaChanges),
			ms(percentile(delays, 50)), ms(p99), ms(percentile(delays, 100))))
	return nil
}
