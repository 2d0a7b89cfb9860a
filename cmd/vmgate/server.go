package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmgate/vmgate/api"
	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/connlimit"
	"github.com/vmgate/vmgate/internal/console"
	"github.com/vmgate/vmgate/internal/dbclock"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/httpapi"
	"github.com/vmgate/vmgate/internal/idempotency"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/secondfactor"
	"github.com/vmgate/vmgate/internal/sse"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
	"github.com/vmgate/vmgate/internal/webui"
)

// serverCmd runs vmgate. Every flag has a VMGATE_* environment variable.
type serverCmd struct {
	Listen          string        `default:"127.0.0.1:8080" env:"VMGATE_LISTEN" help:"Address to listen on (host:port; port 0 picks a free one)."`
	TLSCert         string        `env:"VMGATE_TLS_CERT" help:"PEM certificate (with its chain) to serve HTTPS with; reloaded on SIGHUP and when the file changes."`
	TLSKey          string        `env:"VMGATE_TLS_KEY" help:"PEM private key of --tls-cert."`
	PlainHTTP       bool          `env:"VMGATE_PLAIN_HTTP" help:"Allow plain HTTP on an address that is not loopback: only behind a TLS-terminating proxy."`
	Database        string        `env:"VMGATE_DATABASE" help:"sqlite:///path/vmgate.db or postgres://... (default: <data-dir>/vmgate.db)."`
	DataDir         string        `env:"VMGATE_DATA_DIR" help:"Directory for the SQLite database and the secret key (default: current directory; in dev mode a fresh temporary one)."`
	SecretKeyFile   string        `env:"VMGATE_SECRET_KEY_FILE" help:"AES-256 key sealing cluster token secrets and JWT signing keys; created 0600 if absent (default: <data-dir>/vmgate.key)."`
	TokenTTL        time.Duration `default:"1h" env:"VMGATE_TOKEN_TTL" help:"Lifetime of an access token."`
	SessionMax      time.Duration `default:"24h" env:"VMGATE_SESSION_MAX" help:"Longest life of a session from login."`
	TrustedProxies  []string      `env:"VMGATE_TRUSTED_PROXIES" help:"Addresses or CIDRs whose X-Forwarded-For or Forwarded header is believed."`
	LogFormat       string        `default:"text" enum:"text,json" env:"VMGATE_LOG_FORMAT" help:"Log format: text or json."`
	LogLevel        string        `default:"info" enum:"debug,info,warn,error" env:"VMGATE_LOG_LEVEL" help:"Log level."`
	Dev             bool          `env:"VMGATE_DEV" help:"Development mode: an embedded emulated PVE cluster and a fresh database."`
	DevSpeed        float64       `default:"1" env:"VMGATE_DEV_SPEED" help:"Dev mode: the emulator's time multiplier (1: a live migration of VM 100 takes about 20 s)."`
	StoreTimeout    time.Duration `default:"5s" env:"VMGATE_STORE_TIMEOUT" help:"Longest wait for one database call (connecting included); past it a request answers 503 store_unavailable."`
	MetricsListen   string        `env:"VMGATE_METRICS_LISTEN" help:"Also serve /metrics, to every peer, on this address of its own (host:port); firewall it."`
	MetricsPublic   bool          `env:"VMGATE_METRICS_PUBLIC" help:"Serve /metrics on the main listener to every client (default: loopback clients only)."`
	AuditRetention  time.Duration `default:"9600h" env:"VMGATE_AUDIT_RETENTION" help:"Keep audit records this long (default 400 days); older ones are pruned hourly, leaving a checkpoint the rest verifies from."`
	RequestTimeout  time.Duration `default:"30s" env:"VMGATE_REQUEST_TIMEOUT" help:"Longest time one request may take as a whole; long-polls get their wait on top, event streams are bounded by their own limits."`
	ShutdownTimeout time.Duration `default:"25s" env:"VMGATE_SHUTDOWN_TIMEOUT" help:"On SIGTERM, how long requests still running (writes to PVE) may take to finish; long-polls and event streams end at once."`

	// What one client may hold (docs/security.md item 34, docs/decisions/0039).
	MaxConnections          int           `default:"4096" env:"VMGATE_MAX_CONNECTIONS" help:"Client connections open at once; past it the one idle the longest is closed, or with none idle the new one is refused. 0: no cap."`
	MaxConnectionsPerClient int           `default:"256" env:"VMGATE_MAX_CONNECTIONS_PER_CLIENT" help:"Connections open at once from one client network (--client-ipv4-prefix, --client-ipv6-prefix; --trusted-proxies are held by --max-connections only), reclaimed or refused likewise. 0: no cap."`
	IdleTimeout             time.Duration `default:"120s" env:"VMGATE_IDLE_TIMEOUT" help:"How long a keep-alive connection may wait for its next request before it is closed."`
	MaxStreamsPerSession    int           `default:"8" env:"VMGATE_MAX_STREAMS_PER_SESSION" help:"Event streams (the API's and the web UI's live pages) one session or API token holds open at once; past it 429 too_many_streams. 0: no cap."`
	MaxStreamsPerUser       int           `default:"32" env:"VMGATE_MAX_STREAMS_PER_USER" help:"Event streams one user holds open at once, every session and API token together. 0: no cap."`
	consoleFlags            `embed:""`    // server_console.go

	// Single sign-on (server_oidc.go).
	OIDC oidcFlags `embed:""`

	// A rotation of the key file (admin keys rotate-seal, docs/deploy.md).
	PreviousSecretKeyFile string `env:"VMGATE_PREVIOUS_SECRET_KEY_FILE" help:"During a rotation of the key file: the old key file, which then only opens what it sealed."`

	// Login throttling (internal/auth).
	MaxConcurrentHashes int `env:"VMGATE_MAX_CONCURRENT_HASHES" help:"Password hashes run at once (default: the cores less one, at least 1)."`
	LoginQueue          int `env:"VMGATE_LOGIN_QUEUE" help:"Logins that may wait for a hashing slot (default: about 1 s of expected wait)."`
	ClientIPv4Prefix    int `name:"client-ipv4-prefix" default:"32" env:"VMGATE_CLIENT_IPV4_PREFIX" help:"IPv4 prefix length of a client network, the unit of login throttling."`
	ClientIPv6Prefix    int `name:"client-ipv6-prefix" default:"64" env:"VMGATE_CLIENT_IPV6_PREFIX" help:"IPv6 prefix length of a client network, the unit of login throttling."`

	// MemoryLimit is the Go runtime's soft memory limit (memlimit.go).
	MemoryLimit string `default:"auto" env:"VMGATE_MEMORY_LIMIT" help:"Soft memory limit: auto (twice the live heap, at least 32 MiB, plus what the password hashes may hold), off, or a size like 256MiB. GOMEMLIMIT wins over auto."`

	// FeedPoll is how often the store's change feed is read when nothing pushes it:
	// the fallback while the PostgreSQL listener is lost, and on SQLite what carries
	// other processes' writes. Hidden: tests set it very long to show that changes
	// arrive pushed, not polled.
	FeedPoll time.Duration `hidden:"" default:"1s" env:"VMGATE_FEED_POLL" help:"How often the change feed is polled when nothing pushes it."`

	// OperationLease is how long an operation on many VMs stays with a process that
	// stops renewing it (killed) before another takes it over. Hidden: tests
	// shorten it.
	OperationLease time.Duration `hidden:"" default:"60s" env:"VMGATE_OPERATION_LEASE" help:"How long a dead process keeps its operations on many VMs before another takes them over."`

	// TaskPoll is how often a running task is read from PVE (vmops.Config.PollInterval).
	// Hidden: the end-to-end tests shorten it, so that they wait less for a task's
	// end to be seen.
	TaskPoll time.Duration `hidden:"" default:"1s" env:"VMGATE_TASK_POLL" help:"How often a running task is read from PVE, however many clients watch it."`

	// KeyLease is how long an Idempotency-Key stays with a process that stops
	// renewing it (killed) before another takes it over (docs/decisions/0020).
	// Hidden: tests shorten it.
	KeyLease time.Duration `hidden:"" default:"60s" env:"VMGATE_KEY_LEASE" help:"How long a dead process keeps the Idempotency-Keys it claimed before another takes them over."`

	// CPUProfile is for cmd/vmgate-bench (docs/performance.md): hidden, off by default.
	CPUProfile string `hidden:"" env:"VMGATE_CPU_PROFILE" help:"Write a CPU profile of the whole run to this file (for the benchmark)."`
	// HeapProfile is for cmd/vmgate-bench too: what is live when the server stops.
	HeapProfile string `hidden:"" env:"VMGATE_HEAP_PROFILE" help:"Write a heap profile to this file when the server stops (for the benchmark)."`

	maintenanceFlags  `embed:""`
	secondFactorFlags `embed:""` // server_secondfactor.go
	notifyFlags       `embed:""` // server_notify.go

	devPassword      string // the dev admin's password, when this start created the admin
	devPasswordShown bool   // the password was generated, so it must be printed
}

func (c *serverCmd) logger(out io.Writer) *slog.Logger {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(c.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(out, opts))
	}
	return slog.New(slog.NewTextHandler(out, opts))
}

// paths resolves the data directory, the database and the key file.
func (c *serverCmd) paths() (cleanup func(), err error) {
	cleanup = func() {}
	if c.DataDir == "" {
		if c.Dev {
			dir, err := os.MkdirTemp("", "vmgate-dev-")
			if err != nil {
				return cleanup, err
			}
			c.DataDir = dir
			cleanup = func() { os.RemoveAll(dir) }
		} else {
			c.DataDir = "."
		}
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return cleanup, err
	}
	if c.Database == "" {
		abs, err := filepath.Abs(filepath.Join(c.DataDir, "vmgate.db"))
		if err != nil {
			return cleanup, err
		}
		c.Database = "sqlite://" + abs
	}
	if c.SecretKeyFile == "" {
		c.SecretKeyFile = filepath.Join(c.DataDir, "vmgate.key")
	}
	return cleanup, nil
}

// app is a composed vmgate: everything the server command starts and stops.
type app struct {
	store    store.Store
	trail    *audit.Trail
	auth     *auth.Service
	accounts *accounts.Service
	mfa      *secondfactor.Service // server_secondfactor.go
	fleet    *fleet.Service
	vms      *vmops.Service
	ops      *operations.Service
	notify   *notifyApp // server_notify.go
	keys     *idempotency.Keeper
	clock    *dbclock.Monitor
	handler  *httpapi.Server
	registry *prometheus.Registry // the metrics /metrics serves
	consoles *console.Service     // nil: no consoles
}

func (c *serverCmd) compose(ctx context.Context, log *slog.Logger) (*app, error) {
	key, err := seal.LoadOrCreateKey(c.SecretKeyFile)
	if err != nil {
		return nil, err
	}
	sealer, err := newSealer(key, c.PreviousSecretKeyFile)
	if err != nil {
		return nil, err
	}
	// The store keys the audit chain with a key the key file seals (docs/security.md item 30).
	st, err := store.OpenWith(ctx, c.Database, store.Options{Timeout: c.StoreTimeout, PollInterval: c.FeedPoll, Logger: log,
		Sealer: sealer})
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	a := &app{store: st}
	// One audit trail for every use case; each record is attributed from the
	// request facts the adapter put in its context (internal/audit).
	a.trail = audit.New(st, audit.Options{Logger: log})
	var srv *httpapi.Server
	a.auth, err = auth.New(ctx, st, auth.Config{
		Sealer:     sealer,
		Issuer:     "vmgate",
		Audience:   "vmgate",
		TokenTTL:   c.TokenTTL,
		SessionMax: c.SessionMax,
		Logger:     log,
		// auth's security events are attributed from the request's facts like
		// every other record: address and request id always, the caller where the
		// record names nobody else (internal/audit).
		Audit: a.trail.Record,

		MaxConcurrentHashes: c.MaxConcurrentHashes,
		HashQueue:           c.LoginQueue,
		IPv4Prefix:          c.ClientIPv4Prefix,
		IPv6Prefix:          c.ClientIPv6Prefix,
		LoginOutcome: func(outcome string) {
			if srv != nil {
				srv.LoginOutcome(outcome)
			}
		},
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	if a.mfa, err = c.secondFactors(st, a.auth, sealer, a.trail); err != nil {
		st.Close()
		return nil, err
	}
	a.accounts = accounts.New(accounts.Config{Store: st, Auth: a.auth, Audit: a.trail, StepUp: a.mfa})
	a.fleet, err = fleet.New(ctx, fleet.Config{Store: st, Sealer: sealer, Logger: log, Audit: a.trail})
	if err != nil {
		st.Close()
		return nil, err
	}
	// An Idempotency-Key whose holder died, or whose outcome became known later,
	// is settled with the answer the API would have given (httpapi.KeyOutcomes);
	// the use cases say when a request's outcome became known (KeySettled).
	var keys *idempotency.Keeper
	a.vms = vmops.New(vmops.Config{Store: st, Clients: a.fleet, Logger: log, Audit: a.trail, PollInterval: c.TaskPoll,
		KeySettled: func(ctx context.Context, userID int64, key string) {
			keys.Settle(ctx, idempotency.Key{UserID: userID, Name: key})
		}})
	opsCfg := operations.Config{Store: st, Audit: a.trail, Logger: log, Lease: c.OperationLease}
	if err := c.maintenanceConfig(&opsCfg); err != nil {
		st.Close()
		return nil, err
	}
	a.ops = operations.New(a.vms, opsCfg)
	if a.notify, err = c.composeNotify(st, sealer, a.fleet, a.trail, a.vms.Owner(), log); err != nil {
		st.Close()
		return nil, err
	}
	keys = idempotency.New(idempotency.Config{Store: st, Settle: httpapi.KeyOutcomes(a.vms, a.ops), Logger: log, Lease: c.KeyLease})
	a.keys = keys
	// One count of event streams for the API and the web UI: a user's cap holds
	// across both.
	streams := sse.NewLimiter(sse.Limits{PerSession: flagCap(c.MaxStreamsPerSession), PerUser: flagCap(c.MaxStreamsPerUser)})
	// The embedded OpenAPI YAML becomes the served JSON once, at start.
	spec, err := api.OpenAPIJSON()
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("api/openapi.yaml: %w", err)
	}
	sso, mappings, err := c.OIDC.singleSignOn(st, a.auth, a.accounts, a.trail, log)
	if err != nil {
		st.Close()
		return nil, err
	}
	// The web UI calls the same use cases; the API hands it every path that is
	// not the API's (docs/decisions/0012). Its CSRF key derives from the key file,
	// which every replica shares.
	if a.consoles, err = c.consoleFlags.consoles(st, a.fleet, a.trail, log); err != nil {
		st.Close()
		return nil, err
	}
	ui, err := webui.New(webui.Config{
		Sessions: a.auth, Accounts: a.accounts, Fleet: a.fleet, VMs: a.vms, Operations: a.ops, Audit: a.trail,
		Secret: key, TokenTTL: c.TokenTTL, Status: httpapi.StatusOf, NoteCaller: httpapi.NoteCaller, Logger: log,
		Streams: streams, SSO: ssoOf(sso), SecondFactors: a.mfa,
		Notifications: a.notify.svc, Identity: mappings, Consoles: uiConsoles(a.consoles),
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	// The replica's clock against the database's (internal/dbclock): measured
	// here once before anything is served, then every minute by Run.
	a.clock = dbclock.New(dbclock.Config{Measure: st.ClockOffset, Logger: log})
	if err := a.clock.Check(ctx); err != nil {
		log.Warn(err.Error())
	}
	a.registry = prometheus.NewRegistry()
	a.registry.MustRegister(a.clock)
	registerStoreWriter(a.registry, st)
	if a.consoles != nil {
		a.consoles.Register(a.registry)
	}
	srv, err = httpapi.New(httpapi.Config{
		Sessions: a.auth, Accounts: a.accounts, Audit: a.trail, Store: st, Fleet: a.fleet, VMs: a.vms, Operations: a.ops,
		Keys: a.keys, SecondFactors: a.mfa,
		Gates:  []httpapi.ReadyGate{{Name: "clock", Check: a.clock.Ready}},
		Logger: log, TrustedProxies: c.TrustedProxies, Registry: a.registry, OpenAPIJSON: spec,
		Notifications:  a.notify.svc,
		MetricsPublic:  c.MetricsPublic,
		RequestTimeout: c.RequestTimeout,
		UI:             ui,
		Streams:        streams,
		Identity:       mappings,
		Consoles:       consolesOrNil(a.consoles),
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	a.handler = srv
	return a, nil
}

func (c *serverCmd) Run() error {
	logOut := newLogWriter(os.Stderr)
	defer logOut.Close()
	log := c.logger(logOut)
	if c.HeapProfile != "" {
		defer writeHeapProfile(c.HeapProfile, log)
	}
	if c.CPUProfile != "" {
		stopProfile, err := startCPUProfile(c.CPUProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	cleanup, err := c.paths()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cert, err := c.transport(ctx, log)
	if err != nil {
		return err
	}

	a, err := c.compose(ctx, log)
	if err != nil {
		return err
	}
	defer a.store.Close()
	defer a.fleet.Close()
	defer a.auth.Close()

	var sim *pvesim.Server
	if c.Dev {
		// The emulator outlives the signal: it closes (deferred) only after the
		// HTTP server has drained, so that requests still running reach it.
		if sim, err = c.startDev(ctx, context.WithoutCancel(ctx), a, log); err != nil {
			return err
		}
		defer sim.Close()
		simB, err := c.startDevB(ctx, context.WithoutCancel(ctx), a, log) // server_remote.go
		if err != nil {
			return err
		}
		defer simB.Close()
	}

	raw, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	ln, err := c.limitConnections(raw, log)
	if err != nil {
		raw.Close()
		return err
	}
	a.registry.MustRegister(ln)
	var mln net.Listener
	if c.MetricsListen != "" {
		if mln, err = net.Listen("tcp", c.MetricsListen); err != nil {
			ln.Close()
			return fmt.Errorf("listen on %s (--metrics-listen): %w", c.MetricsListen, err)
		}
		log.Info("serving /metrics on a listener of its own", "address", mln.Addr().String())
	}
	base := scheme(cert) + "://" + ln.Addr().String()
	// The first line on stdout says where vmgate listens; tests and scripts read it.
	show("vmgate listening on %s", base)
	if c.Dev {
		c.printDevHelp(base)
	}

	bg, cancelBG := context.WithCancel(context.Background())
	if err := governMemory(bg, c.MemoryLimit, c.MaxConcurrentHashes, log); err != nil {
		cancelBG()
		return err
	}
	var wg sync.WaitGroup
	prune := func(ctx context.Context) error {
		return pruneEvery(ctx, a.store, time.Hour, store.PruneOptions{AuditOlderThan: c.AuditRetention}, log)
	}
	// The trail's Run writes the denials it folds; at the end it writes every
	// count still open, before the store closes.
	for _, run := range append([]func(context.Context) error{a.auth.Run, a.vms.Run, a.ops.Run, a.keys.Run, prune, a.trail.Run, a.clock.Run},
		a.notify.workers()...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(bg); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("background worker stopped", "error", err)
			}
		}()
	}

	hs := httpapi.NewHTTPServerWith(c.Listen, a.handler, log, httpapi.Timeouts{Idle: c.IdleTimeout})
	hs.ConnState = ln.ConnState // which connections are idle, for the caps
	served := make(chan error, 2)
	go func() { served <- serve(hs, ln, cert) }()
	var ms *http.Server
	if mln != nil {
		ms = httpapi.NewHTTPServer(c.MetricsListen, a.handler.MetricsHandler(), log)
		go func() { served <- ms.Serve(mln) }()
	}
	if err := sdNotify("READY=1"); err != nil {
		log.Warn("systemd notification failed", "error", err)
	}
	select {
	case err = <-served:
	case <-ctx.Done():
		err = c.shutdown(a, hs, log)
	}
	if ms != nil {
		ms.Close()
	}
	cancelBG()
	wg.Wait()
	// Followers and searches stop; the tasks they follow stay in the store for
	// the next process or another replica (docs/decisions: graceful stop). The
	// operations on many VMs this process drove are given up for them too.
	if a.consoles != nil {
		a.consoles.Close() // the hijacked connections no shutdown waits for
	}
	a.ops.Close()
	a.vms.Close()
	a.keys.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// limitConnections holds the listener's connections within --max-connections
// and --max-connections-per-client (docs/security.md item 34). A client network is the one
// of the login throttling; the trusted proxies carry many clients on one
// address, so only the total holds them.
func (c *serverCmd) limitConnections(ln net.Listener, log *slog.Logger) (*connlimit.Listener, error) {
	var exempt []netip.Prefix
	for _, p := range c.TrustedProxies {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return nil, fmt.Errorf("--trusted-proxies: %q is neither an address nor a CIDR", p)
			}
			pfx = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		exempt = append(exempt, pfx.Masked())
	}
	return connlimit.New(ln, connlimit.Limits{
		Total: flagCap(c.MaxConnections), PerNetwork: flagCap(c.MaxConnectionsPerClient),
		IPv4Prefix: c.ClientIPv4Prefix, IPv6Prefix: c.ClientIPv6Prefix, Exempt: exempt, Logger: log,
	}), nil
}

// flagCap turns a cap flag, where 0 means none, into the limits' terms, where 0
// is the default and a negative cap is none.
func flagCap(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// shutdown stops serving on SIGTERM: no new connections; every long-poll
// answers at once with what it has and every event stream ends with "event:
// shutdown" (vmops.Drain); requests still writing to PVE get --shutdown-timeout
// to finish. Past it the rest are cut, logged, and the stop still succeeds (exit
// 0): their task rows are reconciled from PVE by the next process, so a service
// manager sees a clean stop either way.
func (c *serverCmd) shutdown(a *app, hs *http.Server, log *slog.Logger) error {
	_ = sdNotify("STOPPING=1")
	began := time.Now()
	log.Info("shutting down: ending long-polls and event streams, draining requests", "timeout", c.ShutdownTimeout)
	a.vms.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		log.Error("shutdown: requests still running after --shutdown-timeout were cut; their tasks are reconciled from PVE on the next start",
			"timeout", c.ShutdownTimeout)
		hs.Close()
		err = nil
	}
	log.Info("shut down", "took", time.Since(began).Round(time.Millisecond))
	return err
}

const devAdmin = "admin@vmgate.local"

// devPassword returns $VMGATE_DEV_PASSWORD or a fresh random one.
func devPassword() (string, bool) {
	if p := os.Getenv("VMGATE_DEV_PASSWORD"); p != "" {
		return p, false
	}
	var b [18]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:]), true
}

// startDev starts the embedded emulator, makes sure the dev admin exists and
// registers the emulated cluster as cluster 1 "dev" through the same code path as
// POST /api/v1/clusters (so its fingerprint is pinned).
func (c *serverCmd) startDev(ctx, serveCtx context.Context, a *app, log *slog.Logger) (_ *pvesim.Server, err error) {
	sim := pvesim.DevCluster(pvesim.Options{Speed: c.DevSpeed, Ceph: c.DevCeph})
	srv, err := sim.Serve(serveCtx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		return nil, fmt.Errorf("start the emulated cluster: %w", err)
	}
	a.ops.AddHook(devHookName, devHook(srv, sim.DevToken()))
	defer func() {
		if err != nil {
		}
	}()
	eps := srv.Endpoints()
	tokenID, secret, _ := strings.Cut(sim.DevToken(), "=")
	spec := fleet.ClusterSpec{
		Name: "dev", Endpoints: []string{eps[0].URL}, TokenID: tokenID, TokenSecret: secret,
		TLSFingerprint: eps[0].Fingerprint,
	}
	existing, err := a.fleet.List(ctx)
	if err != nil {
		return nil, err
	}
	var cl fleet.Cluster
	if len(existing) == 0 {
		cl, err = a.fleet.Register(ctx, spec)
	} else {
		// A kept --data-dir: the emulator came up on a new port with new certificates.
		cl, err = a.fleet.Update(ctx, existing[0].ID, fleet.ClusterPatch{
			Endpoints: &spec.Endpoints, TokenID: &spec.TokenID, TokenSecret: &spec.TokenSecret,
			TLSFingerprint: &spec.TLSFingerprint,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("register the emulated cluster: %w", err)
	}
	pw, generated := devPassword()
	if _, err = a.store.UserByEmail(ctx, devAdmin); errs.Is(err, errs.NotFound) {
		host := accounts.NewHost(accounts.HostConfig{Store: a.store, Auth: a.auth, Audit: a.trail, Via: "dev"})
		if _, err = host.CreateUser(ctx, accounts.NewUser{Email: devAdmin, Nickname: "Dev Admin", Password: pw,
			Role: accounts.RoleAdmin}); err != nil {
			return nil, fmt.Errorf("create the dev admin: %w", err)
		}
		c.devPassword, c.devPasswordShown = pw, generated
	} else if err != nil {
		return nil, err
	}
	log.Info("dev mode", "cluster", cl.ID, "emulator", eps[0].URL, "data_dir", c.DataDir)
	return srv, nil
}

// printDevHelp tells a person how to start: the credentials and a first command.
func (c *serverCmd) printDevHelp(base string) {
	show("dev admin: %s", devAdmin)
	switch {
	case c.devPasswordShown:
		show("dev password: %s", c.devPassword)
	case c.devPassword != "":
		show("dev password: $VMGATE_DEV_PASSWORD")
	default:
		show("dev password: unchanged (kept data dir)")
	}
	pw := "$VMGATE_DEV_PASSWORD"
	if c.devPasswordShown {
		pw = c.devPassword
	}
	switch {
	case c.devPasswordShown:
		show("web UI: %s/ (log in as %s, password %s)", base, devAdmin, c.devPassword)
	case c.devPassword != "":
		show("web UI: %s/ (log in as %s, password $VMGATE_DEV_PASSWORD)", base, devAdmin)
	default:
		show("web UI: %s/ (log in as %s)", base, devAdmin)
	}
	show("try:")
	show("  TOKEN=$(curl -s %s/api/v1/user/login -H 'Content-Type: application/json' -d \"{\\\"email\\\":\\\"%s\\\",\\\"password\\\":\\\"%s\\\"}\" | jq -r .data.token)", base, devAdmin, pw)
	show("  curl -s -H \"Authorization: Bearer $TOKEN\" %s/api/v1/pve/clusters/1/vms | jq", base)
}

// startCPUProfile profiles the process until the returned function is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeHeapProfile writes what is live now (after a collection) to path.
func writeHeapProfile(path string, log *slog.Logger) {
	f, err := os.Create(path)
	if err != nil {
		log.Error("heap profile", "error", err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		log.Error("heap profile", "error", err)
	}
}

// pruneEvery deletes what no one needs any more — the change feed past a
// day, sessions ended a week ago, expired idempotency keys, audit records past
// their retention — once at start and then every interval, so the database does
// not grow with every login. Each round also logs the audit chain's head: a copy
// of it outside the database is what reveals a chain rewritten from some row on
// (docs/decisions/0016).
func pruneEvery(ctx context.Context, st store.Store, every time.Duration, opts store.PruneOptions, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		res, err := st.Prune(ctx, time.Now(), opts)
		switch {
		case errors.Is(err, context.Canceled):
			return err
		case err != nil:
			log.Error("prune failed", "error", err)
		case res.Changes+res.Sessions+res.IdempotencyKeys+res.Audit > 0:
			log.Info("pruned", "changes", res.Changes, "sessions", res.Sessions, "idempotency_keys", res.IdempotencyKeys,
				"audit_records", res.Audit)
		}
		if c, err := st.AuditChain(ctx); err == nil {
			log.Info("audit chain head", "id", c.HeadID, "chain", c.HeadChain, "checkpoint", c.CheckpointID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
