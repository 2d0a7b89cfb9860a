package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"

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
	log     *slog.Logger
}

type ctxKey int

const (
	infoKey ctxKey = iota
	principalKey
)

func infoFrom(r *http.Request) *reqInfo {
	if ri, ok := r.Context().Value(infoKey).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{log: slog.Default()}
}

func logFrom(r *http.Request) *slog.Logger { return infoFrom(r).log }

func setRoutePattern(r *http.Request, p string) { infoFrom(r).pattern = p }

// clientAddr returns the caller's address for rate limits and audit.
func clientAddr(r *http.Request) string { return infoFrom(r).addr }

// requestID returns the request's id.
func requestID(r *http.Request) string { return infoFrom(r).id }

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
		ri := &reqInfo{id: id, addr: addr, pattern: "unmatched"}
		ri.log = s.log.With(slog.String("request_id", id))
		w.Header().Set("X-Request-Id", id)
		if s.ui == nil || IsAPIPath(r.URL.Path) {
			setAPIHeaders(w.Header()) // the web UI sets its own
		}
		// Answers carry tokens and inventory; no cache may keep any of them, and
		// every 401 then looks the same wherever it comes from.
		w.Header().Set("Cache-Control", "no-store")
		rec := &statusRecorder{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), infoKey, ri))
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				ri.log.Error("panic", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
				if rec.status == 0 {
					writeError(rec, r, errs.E(errs.Internal, "internal error"))
				}
			}
			elapsed := s.now().Sub(start)
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			s.metrics.observeRequest(r.Method, ri.pattern, status, elapsed)
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				// The path only: a token in a query string must never reach the log.
				slog.String("path", r.URL.Path),
				slog.String("route", ri.pattern),
				slog.Int("status", status),
				slog.Int("bytes", rec.bytes),
				slog.Duration("duration", elapsed),
				slog.String("remote", ri.addr),
			}
			if ri.userID != 0 {
				attrs = append(attrs, slog.Int64("user_id", ri.userID), slog.String("session", ri.session))
			}
			ri.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
		}()
		if addrErr != nil { // the trusted proxy's forwarding headers cannot be read: no client to serve
			writeError(rec, r, addrErr)
			return
		}
		next.ServeHTTP(rec, r)
	})
}
