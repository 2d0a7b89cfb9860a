package httpapi

import (
	"net/http"
	"regexp"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/errs"
)

// sessionJSON is one live session (docs/security.md item 29).
type sessionJSON struct {
	ID         string    `json:"id"`
	CreatedAt  time.Time `json:"createdAt"`
	LastSeenAt time.Time `json:"lastSeenAt"`
	Address    string    `json:"address"`
	UserAgent  string    `json:"userAgent"`
	Current    bool      `json:"current"`
}

func sessionsJSON(list []accounts.Session) []sessionJSON {
	out := make([]sessionJSON, 0, len(list))
	for _, s := range list {
		out = append(out, sessionJSON{ID: s.ID, CreatedAt: s.CreatedAt.UTC(), LastSeenAt: s.LastSeenAt.UTC(),
			Address: s.Address, UserAgent: s.UserAgent, Current: s.Current})
	}
	return out
}

// sessionIDPattern is the shape of a session id (base64url); anything else is 400
// before the store is asked.
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func pathSessionID(r *http.Request, name string) (string, error) {
	v := r.PathValue(name)
	if !sessionIDPattern.MatchString(v) {
		return "", errs.E(errs.Invalid, "session id must be 1 to 128 characters of A-Z, a-z, 0-9, - and _, not %q", safeText(v))
	}
	return v, nil
}

func (s *Server) mySessions(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	list, err := s.accounts.MySessions(r.Context(), principal(r))
	if err != nil {
		return err
	}
	writeData(w, sessionsJSON(list))
	return nil
}

func (s *Server) endMySession(w http.ResponseWriter, r *http.Request) error {
	sid, err := pathSessionID(r, "id")
	if err != nil {
		return err
	}
	if err := s.accounts.EndMySession(r.Context(), principal(r), sid); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

func (s *Server) userSessions(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	list, err := s.accounts.UserSessions(r.Context(), principal(r), id)
	if err != nil {
		return err
	}
	writeData(w, sessionsJSON(list))
	return nil
}

func (s *Server) endUserSession(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	sid, err := pathSessionID(r, "sessionId")
	if err != nil {
		return err
	}
	if err := s.accounts.EndUserSession(r.Context(), principal(r), id, sid); err != nil {
		return err
	}
	writeOK(w)
	return nil
}
