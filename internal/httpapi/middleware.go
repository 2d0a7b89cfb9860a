package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
)

// reqInfo is what the outer middleware learns about a request as it passes through
// the layers; the handlers fill in the route and the caller for the log line.
type reqInfo struct {
	id      string
	addr    string // client address after trusted-proxy resolution
	pattern string // the route pattern, for metrics and logs
	userID  int64
	session string
	// principal is the authenticated caller (wrap sets it on authed routes).
	principal *auth.Principal
	// metrics are the route's pre-resolved series, when a route matched.
	metrics *routeMetrics
	// query is the parsed query string, parsed once (query).
	query url.Values
	// deadline is the request's deadline, when its route has one (deadline.go).
	deadline requestDeadline
	base     *slog.Logger // the server's logger
	log      *slog.Logger // base with the request id, made when first needed (logFrom)
}

// logger returns the request's logger: the server's, with the request id.
func (ri *reqInfo) logger() *slog.Logger {
	if ri.log == nil {
		ri.log = ri.base.With(slog.String("request_id", ri.id))
	}
	return ri.log
}

type ctxKey int

const (
	infoKey ctxKey = iota
)

func infoFrom(r *http.Request) *reqInfo {
	if ri, ok := r.Context().Value(infoKey).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{base: slog.Default()}
}

func logFrom(r *http.Request) *slog.Logger { return infoFrom(r).logger() }

// NoteCaller names the caller of r in its log line, for a handler that
// authenticates by itself (the web UI): session is the audit trail's name of
// the session (auth.Principal.AuditSession).
func NoteCaller(r *http.Request, userID int64, session string) {
	if ri, ok := r.Context().Value(infoKey).(*reqInfo); ok {
		ri.userID, ri.session = userID, session
	}
}

func setRoutePattern(r *http.Request, p string) { infoFrom(r).pattern = p }

// clientAddr returns the caller's address for rate limits and audit.
func clientAddr(r *http.Request) string { return infoFrom(r).addr }

// requestID returns the request's id.
func requestID(r *http.Request) string { return infoFrom(r).id }

// query returns r's query parameters, parsed once per request (nil, read-only,
// when there are none). Callers must not change them.
func query(r *http.Request) url.Values {
	if r.URL.RawQuery == "" {
		return nil
	}
	ri, ok := r.Context().Value(infoKey).(*reqInfo)
	if !ok {
		return r.URL.Query()
	}
	if ri.query == nil {
		ri.query = r.URL.Query()
	}
	return ri.query
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

func newRequestID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// statusRecorder remembers the status and size written, for the log and metrics.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += n
	return n, err
}

// Flush lets server-sent events through the recorder.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (write deadlines for SSE).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// reqState is what outer allocates per request, in one piece.
type reqState struct {
	info reqInfo
	rec  statusRecorder
}

// cacheNoStore is Cache-Control's one value, shared by every answer.
var cacheNoStore = []string{"no-store"}

// outer is the first layer: request id, client address, panic recovery, the one log
// line per request and the request metrics.
func (s *Server) outer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.now()
		id := r.Header.Get("X-Request-Id")
		if !requestIDPattern.MatchString(id) {
			id = newRequestID()
		}
		addr, addrErr := s.proxies.resolve(r)
		st := &reqState{info: reqInfo{id: id, addr: addr, pattern: "unmatched", base: s.log}}
		ri, rec := &st.info, &st.rec
		h := w.Header()
		h["X-Request-Id"] = []string{id}
		if s.ui == nil || IsAPIPath(r.URL.Path) || addrErr != nil {
			// The web UI sets its own on what it answers; what this layer answers
			// for a UI path itself (a forwarded address it cannot read) gets the
			// API's, which are as strict (docs/security.md item 31: every answer).
			setAPIHeaders(h)
		}
		// Answers carry tokens and inventory; no cache may keep any of them, and
		// every 401 then looks the same wherever it comes from.
		h["Cache-Control"] = cacheNoStore
		rec.ResponseWriter = w
		r = r.WithContext(context.WithValue(r.Context(), infoKey, ri))
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				ri.logger().Error("panic", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
				if rec.status == 0 {
					writeError(rec, r, errs.E(errs.Internal, "internal error"))
				}
			}
			elapsed := s.now().Sub(start)
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			if ri.metrics != nil {
				ri.metrics.observe(r.Method, status, elapsed)
			} else {
				s.metrics.observeRequest(r.Method, ri.pattern, status, elapsed)
			}
			if !s.log.Enabled(r.Context(), slog.LevelInfo) {
				return
			}
			// One call with the attributes in place: no slice, no logger per request.
			req, method, path, route := slog.String("request_id", ri.id), slog.String("method", r.Method),
				// The path only: a token in a query string must never reach the log,
				// nor an API token pasted into the path.
				slog.String("path", auth.RedactAPITokens(r.URL.Path)), slog.String("route", ri.pattern)
			code, size, took, remote := slog.Int("status", status), slog.Int("bytes", rec.bytes),
				slog.Duration("duration", elapsed), slog.String("remote", ri.addr)
			// Straight to the handler, as slog.Logger would without its
			// runtime.Callers: the server's handlers write no source.
			attrs := [...]slog.Attr{req, method, path, route, code, size, took, remote, {}, {}}
			n := 8
			if ri.userID != 0 {
				attrs[8], attrs[9], n = slog.Int64("user_id", ri.userID), slog.String("session", ri.session), 10
			}
			line := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
			line.AddAttrs(attrs[:n]...)
			_ = s.log.Handler().Handle(r.Context(), line)
		}()
		if addrErr != nil { // the trusted proxy's forwarding headers cannot be read: no client to serve
			writeError(rec, r, addrErr)
			return
		}
		next.ServeHTTP(rec, r)
	})
}
