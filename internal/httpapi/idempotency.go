package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/frontend"
	"github.com/vmgate/vmgate/internal/idempotency"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Keys is what the HTTP layer needs of internal/idempotency: claim a request's
// key, replay or keep its answer. *idempotency.Keeper implements it.
type Keys interface {
	Claim(ctx context.Context, k idempotency.Key, requestHash string) (idempotency.Claim, error)
	Keep(ctx context.Context, k idempotency.Key, a idempotency.Answer) error
	Release(ctx context.Context, k idempotency.Key) error
	Await(ctx context.Context, k idempotency.Key)
}

var _ Keys = (*idempotency.Keeper)(nil)

// maxIdempotencyKey is the longest Idempotency-Key accepted.
const maxIdempotencyKey = 255

// replayedHeaders are the headers of a first answer that a replay repeats.
var replayedHeaders = []string{"X-Task-Id", "Location", "X-Operation-Id"}

// idempotencyKey reads the Idempotency-Key header: absent is fine, present must be
// one value of 1 to 255 printable ASCII characters.
func idempotencyKey(r *http.Request) (string, bool, error) {
	vs := r.Header.Values("Idempotency-Key")
	if len(vs) == 0 {
		return "", false, nil
	}
	if len(vs) > 1 {
		return "", false, errs.E(errs.Invalid, "Idempotency-Key given more than once")
	}
	k := vs[0]
	if k == "" || len(k) > maxIdempotencyKey {
		return "", false, errs.E(errs.Invalid, "Idempotency-Key must be 1 to %d characters", maxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", false, errs.E(errs.Invalid, "Idempotency-Key must be printable ASCII")
		}
	}
	return k, true, nil
}

// requestHash identifies a request for its Idempotency-Key: the method, the path, the
// query with its parameters sorted, and the body with insignificant JSON white space
// removed (an empty JSON object is no body: the power routes take either).
func requestHash(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.Query().Encode()))
	h.Write([]byte{0})
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		body = compact.Bytes()
	}
	if string(body) != "{}" {
		h.Write(body)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// keyed is the Idempotency-Key middleware of a write route (docs/design.md §3.2,
// docs/decisions/0085): it runs next once per (caller, key) within
// idempotency.TTL. A malformed key is 400 before anything else the route checks.
// With no key it just runs next. With a key it claims the key first: a repeat of
// the same request replays the first answer (status, body, X-Task-Id, Location)
// and runs nothing; a different request under the key is 422; a repeat while
// the first still runs is 409 in_progress, naming the first request's task row
// when it has one. The key never reaches PVE.
//
// The answer decides what becomes of the key: one that started nothing (a 4xx
// before PVE was asked — invalid, refused by a grant, the guest's state — or a
// 503 because the cluster is down) releases it so that a retry runs again; one
// that started a task, or may have (an ambiguous write: its outcome is awaited,
// the key stays in progress until it is known), is kept.
func (s *Server) keyed(next handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, present, err := idempotencyKey(r)
		if err != nil {
			return err
		}
		if !present {
			return next(w, r)
		}
		if s.keys == nil {
			return errs.E(errs.Internal, "this server keeps no Idempotency-Keys")
		}
		// The body is read here once, for the hash, and handed on as it came.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			return bodyError(err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		key := idempotency.Key{UserID: principal(r).UserID, Name: name}
		hash := requestHash(r, body)
		got, err := s.keys.Claim(r.Context(), key, hash)
		if err != nil {
			return err
		}
		if !got.Claimed {
			return s.claimedBefore(w, r, key, hash, got)
		}

		cw := &captureWriter{header: http.Header{}}
		ctx := context.WithoutCancel(r.Context())
		defer func() {
			if p := recover(); p != nil {
				// A bug (outer answers 500): what the request did is settled from
				// what it wrote, as for an unknown outcome.
				s.keys.Await(ctx, key)
				panic(p)
			}
		}()
		// The task row the request writes names the key (vmActor hands it to the
		// use case), so that whoever settles the key later learns what it asked.
		actErr := next(cw, r)
		if actErr != nil {
			writeError(cw, r, timedOut(r, actErr))
		}
		switch {
		case errors.Is(actErr, vmops.ErrMaybeStarted):
			// Its outcome is unknown: the key stays in progress until vmgate has
			// found the task (or that there is none), and then holds the real answer.
			s.keys.Await(ctx, key)
		case cw.header.Get("X-Task-Id") == "" && cw.status >= 400:
			if err := s.keys.Release(ctx, key); err != nil {
				logFrom(r).Error("idempotency key release failed", slog.String("error", err.Error()))
			}
		default:
			if err := s.keys.Keep(ctx, key, cw.answer()); err != nil {
				logFrom(r).Error("idempotency key completion failed", slog.String("error", err.Error()))
			}
		}
		cw.copyTo(w)
		return nil
	}
}

// claimedBefore answers a request whose key an earlier request claimed: 422 when
// that was another request, 409 in_progress while it runs, else its answer again.
func (s *Server) claimedBefore(w http.ResponseWriter, r *http.Request, key idempotency.Key, hash string, got idempotency.Claim) error {
	switch {
	case got.RequestHash != hash:
		return errs.R(errs.Unprocessable, errs.ReasonIdempotencyKeyReused,
			"Idempotency-Key %q was used for a different request in the last 24 hours", safeText(key.Name))
	case !got.Done:
		e := errs.R(errs.Conflict, errs.ReasonInProgress,
			"the first request with Idempotency-Key %q is still running (since %s)", safeText(key.Name), got.Since.UTC().Format(time.RFC3339))
		if ref := s.keyTaskRef(r.Context(), key, got.Since); ref != 0 {
			e.Message += fmt.Sprintf("; follow it as task %d", ref)
			w.Header().Set("X-Operation-Id", strconv.FormatInt(ref, 10))
			w.Header().Set("Location", taskPath(strconv.FormatInt(ref, 10)))
		}
		return e
	}
	replay(w, got.Answer)
	return nil
}

// keyTaskRef is the task row the request holding key wrote, if any.
func (s *Server) keyTaskRef(ctx context.Context, key idempotency.Key, since time.Time) int64 {
	if s.vms == nil {
		return 0
	}
	return s.vms.KeyTaskRef(ctx, key.UserID, key.Name, since)
}

// KeyOutcomes is how a key whose request no longer answers for it (its outcome
// was unknown, or its process died) is settled (idempotency.Config.Settle): what
// the request came to, asked of the use cases — the operation on many VMs it
// created, else its task — and rendered as its handler renders it. For an
// evacuation or a bulk action that is 202 with the operation and its plan.
func KeyOutcomes(vms frontend.VMs, ops frontend.Operations) idempotency.SettleFunc {
	return func(ctx context.Context, k idempotency.Key, since time.Time) (idempotency.Settlement, error) {
		if ops != nil {
			l, ok, err := ops.ByKey(ctx, k.UserID, k.Name, since)
			if err != nil {
				return idempotency.Settlement{}, err
			}
			if ok {
				return answered(func(w http.ResponseWriter) error { return launched(w, l, nil) }), nil
			}
		}
		o, err := vms.KeyOutcome(ctx, k.UserID, k.Name, since)
		if err != nil {
			return idempotency.Settlement{}, err
		}
		switch o.State {
		case vmops.KeyStartedNothing:
			return idempotency.Settlement{Verdict: idempotency.StartedNothing}, nil
		case vmops.KeyUnknown:
			return idempotency.Settlement{Verdict: idempotency.Unsettled}, nil
		}
		return answered(func(w http.ResponseWriter) error {
			if o.Op == vmops.OpMigrate {
				return renderMigrate(w, o.Outcome.TaskID, o.Err)
			}
			return renderPower(w, o.Outcome, o.Err)
		}), nil
	}
}

// answered is the settlement a rendering answers with.
func answered(render func(http.ResponseWriter) error) idempotency.Settlement {
	cw := &captureWriter{header: http.Header{}}
	if err := render(cw); err != nil {
		writeError(cw, (&http.Request{}).WithContext(context.Background()), err)
	}
	return idempotency.Settlement{Verdict: idempotency.Answered, Answer: cw.answer()}
}

// replay writes a kept first answer again.
func replay(w http.ResponseWriter, a idempotency.Answer) {
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Idempotent-Replayed", "true")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(a.Body)))
	w.WriteHeader(a.Status)
	w.Write(a.Body)
}

// captureWriter buffers an answer so it can be kept before it is sent.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }

func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}

// answer is what was written, as a key keeps it: the status, the body and the
// headers a replay repeats.
func (c *captureWriter) answer() idempotency.Answer {
	hdr := map[string]string{}
	for _, h := range replayedHeaders {
		if v := c.header.Get(h); v != "" {
			hdr[h] = v
		}
	}
	status := c.status
	if status == 0 {
		status = http.StatusOK
	}
	return idempotency.Answer{Status: status, Headers: hdr, Body: c.body.Bytes()}
}

func (c *captureWriter) copyTo(w http.ResponseWriter) {
	for k, vs := range c.header {
		w.Header()[k] = vs
	}
	if c.status == 0 {
		c.status = http.StatusOK
	}
	w.WriteHeader(c.status)
	w.Write(c.body.Bytes())
}
