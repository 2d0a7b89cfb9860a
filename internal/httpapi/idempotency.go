package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

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
// removed.
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
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// idempotent runs act once per (caller, Idempotency-Key) within vmops.IdempotencyTTL.
// With no key it just runs act. With a key it claims the key first: a repeat of the
// same request replays the first answer (status, body, X-Task-Id, Location) and
// starts nothing; a different request under the key is 422; a repeat while the first
// still runs is 409 in_progress. The key never reaches PVE.
//
// It runs after validation and authorization: a request that would be refused anyway
// claims nothing. An answer that started nothing (a 4xx before PVE was asked, a 503
// because the cluster is down) releases the key so that a retry runs again; an answer
// that started a task, or may have (an ambiguous write), is kept.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, body []byte, act func(w http.ResponseWriter, r *http.Request) error) error {
	key, present, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	if !present {
		return act(w, r)
	}
	p := principal(r)
	hash := requestHash(r, body)
	got, err := s.vms.ClaimKey(r.Context(), p.UserID, key, hash)
	if err != nil {
		return err
	}
	if !got.Claimed {
		switch {
		case got.RequestHash != hash:
			return errs.R(errs.Unprocessable, errs.ReasonIdempotencyKeyReused,
				"Idempotency-Key %q was used for a different request in the last 24 hours", safeText(key))
		case !got.Done:
			e := errs.R(errs.Conflict, errs.ReasonInProgress,
				"the first request with Idempotency-Key %q is still running (since %s)", safeText(key), got.Since.UTC().Format(time.RFC3339))
			if got.TaskRef != 0 {
				e.Message += fmt.Sprintf("; follow it as task %d", got.TaskRef)
				w.Header().Set("X-Operation-Id", strconv.FormatInt(got.TaskRef, 10))
				w.Header().Set("Location", taskPath(strconv.FormatInt(got.TaskRef, 10)))
			}
			return e
		}
		replay(w, got.Answer)
		return nil
	}

	cw := &captureWriter{header: http.Header{}}
	// The task row the request writes names the key (vmActor hands it to the use
	// case), so that whoever finishes the key later learns what it asked.
	actErr := act(cw, r)
	if actErr != nil {
		writeError(cw, r, actErr)
	}
	ctx := context.WithoutCancel(r.Context())
	switch {
	case errors.Is(actErr, vmops.ErrMaybeStarted):
		// Its outcome is unknown: the key stays in progress until vmgate has found
		// the task (or that there is none), and then holds the real answer.
		s.vms.HoldKey(ctx, p.UserID, key)
	case cw.header.Get("X-Task-Id") == "" && cw.status >= 400:
		if err := s.vms.ReleaseKey(ctx, p.UserID, key); err != nil {
			logFrom(r).Error("idempotency key release failed", slog.String("error", err.Error()))
		}
	default:
		hdr := map[string]string{}
		for _, h := range replayedHeaders {
			if v := cw.header.Get(h); v != "" {
				hdr[h] = v
			}
		}
		if err := s.vms.KeepAnswer(ctx, p.UserID, key, vmops.Answer{Status: cw.status, Headers: hdr, Body: cw.body.Bytes()}); err != nil {
			logFrom(r).Error("idempotency key completion failed", slog.String("error", err.Error()))
		}
	}
	cw.copyTo(w)
	return nil
}

// KeyAnswer renders what a request with an Idempotency-Key answers, for a key
// vmops finishes on the request's behalf (vmops.Config.Answers): its holder died,
// or its outcome became known only after it had answered outcome_unknown. It is
// the answer the handler gives, through the same rendering: for an evacuation or
// a bulk action, 202 with the operation it created and its plan.
func KeyAnswer(o vmops.KeyOutcome) vmops.Answer {
	cw := &captureWriter{header: http.Header{}}
	var err error
	switch {
	case o.OperationID != 0:
		err = launched(cw, operations.Relaunched(o.OperationID, o.Plan), nil)
	case o.Op == vmops.OpMigrate:
		err = renderMigrate(cw, o.Outcome.TaskID, o.Err)
	default:
		err = renderPower(cw, o.Outcome, o.Err)
	}
	if err != nil {
		writeError(cw, (&http.Request{}).WithContext(context.Background()), err)
	}
	hdr := map[string]string{}
	for _, h := range replayedHeaders {
		if v := cw.header.Get(h); v != "" {
			hdr[h] = v
		}
	}
	return vmops.Answer{Status: cw.status, Headers: hdr, Body: cw.body.Bytes()}
}

// replay writes a stored first answer again.
func replay(w http.ResponseWriter, a vmops.Answer) {
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Idempotent-Replayed", "true")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(a.Body)))
	w.WriteHeader(a.Status)
	w.Write(a.Body)
}

// captureWriter buffers an answer so it can be stored before it is sent.
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
