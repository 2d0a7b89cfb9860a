// Package pve is vmgate's client of the Proxmox VE API: thin, strict and
// standard library only. It knows PVE's wire protocol and nothing of vmgate
// (no users, grants or HTTP status mapping); internal/vmops and internal/fleet
// turn its errors into vmgate's. It shares no code with internal/pvesim: the
// two are independent readings of PVE (the design notes'
// docs/reference/pve-api.md), so each catches the other's mistakes.
//
// # One client per cluster
//
// A Client holds a cluster's endpoints (any node's https://host:8006), its API
// token and its TLS trust, and one http.Transport with keep-alive for all of
// them. Requests carry "Authorization: PVEAPIToken=USER@REALM!NAME=SECRET"
// (no ticket, no CSRF token). Every call has a deadline (Config.Timeout,
// default 30 s) covering its retries and failovers. Answers are asked for
// uncompressed: on the LAN between vmgate and PVE, gzip costs the PVE node more
// time than it saves on the wire (one that comes gzipped anyway is read).
// /cluster/resources, megabytes for a big cluster, is read in one pass over its
// bytes (resources.go).
//
// Connections: at most Config.MaxConnsPerEndpoint (64) per endpoint, and the
// keep-alive pool keeps as many idle, so no connection is closed that the
// next request could use; more concurrent requests wait for a connection
// rather than dial one. pveproxy serves at most 100 requests on a
// connection, closes idle connections after 5 s, and closes the connection
// after every error answer (status ≥ 400). The transport therefore keeps
// idle connections for 4 s only, and Stats counts every new TLS connection
// (NewConns), every answer that closed its connection (ServerCloses) and
// every request, so the "new connections per 1000 requests" figure is
// honest, errors included. Against the emulator it is 0 per 1000 at 1 to 256
// concurrent callers once the pool is warm (TestConnectionPoolReuse);
// against a real PVE it cannot go below 10 per 1000 (the 100-request limit),
// and each new connection replaces one the server closed. TLS sessions are
// not resumed: with connections reused, a full handshake per 100 requests
// costs little, and every handshake checks the pin afresh.
//
// # TLS
//
// Each endpoint is verified by its own rule, applied in the transport's only
// dialer (DialTLSContext, keyed by host:port; the proxy from the environment
// is ignored, since a proxied request would bypass the dialer):
//
//   - Endpoint.Fingerprint set: the leaf certificate's SHA-256 must equal the
//     pin (checked in tls.Config.VerifyConnection, constant-time). Go's chain
//     verification is off for that endpoint because PVE's certificates are
//     self-signed or signed by the cluster's own CA; the pin is the
//     verification, on every handshake (no session resumption).
//   - No fingerprint: Go's normal verification against Config.CACertPEM, or
//     the system roots, including the host name or IP.
//   - No fingerprint and Config.InsecureSkipVerify: not verified (logged).
//
// A refused certificate gives a *TLSError naming the endpoint, the pinned and
// the presented fingerprint. The decision on failover: the refused endpoint
// gets no request (the handshake fails before anything, the token included,
// is sent), and the call moves on to the next endpoint, which is verified by
// its own pin — so failing over never trusts the lying endpoint, and one
// node's renewed certificate does not take the whole cluster down. It is not
// silent: each refusal is logged at error level, counted in
// Stats.TLSFailures, and counts towards the endpoint's circuit breaker
// (Health shows it open); when no endpoint succeeds the *TLSError is in the
// returned *UnavailableError (errors.As finds it). VersionAt checks one
// endpoint alone, without failover, for cluster registration.
//
// # Failover, retries, circuit breakers
//
// Endpoints are tried starting with the last one that worked. A call fails
// over to the next endpoint when the current one cannot be reached (connect
// or TLS failure, a connection broken before the answer), and — for requests
// PVE serves on the contacted node itself (/version, /cluster/*, /nodes) — on
// the 595/596 pseudo-statuses. A 595/596 for a request under /nodes/{node}/
// means that node could not be reached from the endpoint; every other
// endpoint would proxy to the same node, so the client does not fail over or
// retry but returns a *NodeOfflineError (ErrNodeOffline) naming the node.
// PVE's own error answers (401, 403, 400, 500, ...) are final and prove the
// endpoint alive.
//
// Reads (GET) make up to MaxAttempts rounds over the endpoints, with
// jittered exponential backoff between rounds (Config.Backoff, Config.Sleep),
// and give up on a silent endpoint after AttemptTimeout when another is left.
// Writes (POST, DELETE) are never repeated: they fail over only when the
// request certainly was not sent (the connection or handshake failed); a
// write that never left at all is a *NotSentError (NotSent says so, and
// says it of a 595 too: the node never got it). If it may have been sent —
// the connection broke or the deadline passed after the request went out, or
// the proxy answered 596/597 — the outcome is ambiguous: the client reads the
// node's task list (source=all, the vmid, the token's user, since shortly
// before the call in PVE's time) and returns an *AmbiguousError listing the
// tasks of the expected types that this client was not handed as an answer.
// It never picks one, even when one is left: another request for the same VM,
// on this replica or another, may have started it and not yet heard back;
// only the caller, which knows its requests, can match them (internal/vmops).
// The lookup gets its own deadline even when the caller's context has ended.
//
// Each endpoint has a circuit breaker (Config.BreakerThreshold consecutive
// failures open it for Config.BreakerCooldown, then one probe is let through).
// When every circuit is open the call fails at once with ErrUnavailable.
// Config.Now, Config.Sleep and Config.Backoff make all of it testable without
// waiting.
//
// # Clocks
//
// PVE's times (a UPID's start, a task list's, the task list's since filter)
// are on the cluster's clock, which may be minutes off vmgate's. The client
// measures the offset on the Date header of every answer it reads (clock.go:
// the interval each answer allows, narrowed while answers agree, restarted
// when a clock steps): ClockOffset and PVETime. Nothing compares PVE's times
// with the local clock directly.
//
// # Errors
//
// A PVE error answer becomes an *Error with the status, the reason phrase
// (where PVE puts the message of bodiless errors: "401 No ticket", "595 No
// route to host"), the body's message (trailing newline trimmed; PVE ≥ 8.3
// sends one, older PVE only the status line) and a 400's per-parameter errors
// map. Classification: IsNotFound (PVE says "does not exist" with 500s and
// 400s), IsUnauthorized, IsPermissionDenied, IsParameterError, and the
// sentinels ErrUnavailable (→ 503), ErrTimeout (→ 504), ErrNodeOffline,
// ErrBadResponse (→ 502) and ErrInvalidArgument (a caller's bad value; no
// request was sent).
//
// # Hostile input
//
// PVE's answers are read with size limits (8 MiB; 32 MiB for resources, task
// lists and logs; 64 KiB for error bodies), texts are bounded and stripped of
// control characters, and the UPID a write returns must parse and name the
// node, VM and task type asked for. Booleans are read from 0/1, true/false
// and "0"/"1" (Bool); numbers also from strings. An answer of the usual shape
// is decoded in one pass, envelope and data together, and the usual scalars
// without allocating; anything else falls back to the general decoding, which
// alone defines what is accepted and every error (FuzzDecodeAnswer and
// FuzzLenientScalars hold the two to each other). Values that go into URLs are
// validated first — node names (^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$, at
// most 63), vmids (100..999999999), UPIDs (PVE's grammar) — escaped with
// url.PathEscape, and the finished path is checked again; fuzz tests
// (FuzzGuestPath, FuzzTaskPath, FuzzParseUPID) hold that PVE can only ever see
// paths of the expected shapes. Redirects are not followed.
//
// # PVE releases
//
// Clusters run different PVE releases (docs/pve-versions.md lists what
// differs in what vmgate uses). Version reads /version into numbers with
// Compare and AtLeast and one method per difference a caller must decide on
// (StopOverrulesShutdown, PrecheckListsNodesWhenRunning, ...). Where the
// answer itself shows the difference, the client decodes it so that absent
// is not mistaken for empty: MigratePrecheck's node lists are nil when PVE
// did not send them (before 8.4 for a running VM), and error texts are read
// from the status line whether or not the body has a message (before 8.4
// it has none).
//
// # UPIDs
//
// ParseUPID reads PVE's grammar exactly (pstart has 8 or 9 hex digits, id may
// be empty, trailing colon), keeping the original text so String round-trips
// it; FormatUPID prints PVE's canonical form. A task is always asked for at
// its own node (UPID.Node): only that node has its log.
package pve
