package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// message is what one send carries: one event, or a digest of several.
type message struct {
	id     string // the event id header's value
	events []store.NotifyEvent
}

func (m message) digest() bool { return len(m.events) > 1 }

// digestShown is how many of a digest's events its text names one by one.
const digestShown = 20

// title is a message's one-line summary.
func (m message) title() string {
	if m.digest() {
		return fmt.Sprintf("vmgate: %d events (%s to %s)", len(m.events), m.events[0].Kind, m.events[len(m.events)-1].Kind)
	}
	e := m.events[0]
	return fmt.Sprintf("vmgate %s: %s", e.Severity, e.Subject)
}

// severity is the highest of its events'.
func (m message) severity() string {
	s := SeverityInfo
	for _, e := range m.events {
		if severityRank(e.Severity) > severityRank(s) {
			s = e.Severity
		}
	}
	return s
}

// text is the message as plain text, links made absolute with base.
func (m message) text(base string) string {
	var b strings.Builder
	if m.digest() {
		fmt.Fprintf(&b, "%d events while the target's rate limit held them:\n", len(m.events))
	}
	for i, e := range m.events {
		if i == digestShown {
			fmt.Fprintf(&b, "… and %d more (vmgate's Notifications page lists them)\n", len(m.events)-digestShown)
			break
		}
		fmt.Fprintf(&b, "[%s] %s %s: %s", e.At.UTC().Format(time.RFC3339), e.Severity, e.Kind, e.Subject)
		if e.Link != "" {
			b.WriteString(" — " + base + e.Link)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// eventJSON is one event in a webhook's body.
type eventJSON struct {
	ID        int64           `json:"id"`
	Kind      string          `json:"kind"`
	Severity  string          `json:"severity"`
	Time      time.Time       `json:"time"`
	ClusterID int64           `json:"clusterId,omitempty"`
	Subject   string          `json:"subject"`
	Link      string          `json:"link,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
}

func toEventJSON(e store.NotifyEvent, base string) eventJSON {
	out := eventJSON{ID: e.ID, Kind: e.Kind, Severity: e.Severity, Time: e.At.UTC(), ClusterID: e.ClusterID, Subject: e.Subject}
	if e.Link != "" {
		out.Link = base + e.Link
	}
	if json.Valid([]byte(e.Details)) {
		out.Details = json.RawMessage(e.Details)
	}
	return out
}

// webhookBody is a webhook's JSON: the event's fields, or for a digest its
// count, the first events and every event id.
func (m message) webhookBody(base string) []byte {
	if !m.digest() {
		b, _ := json.Marshal(toEventJSON(m.events[0], base))
		return b
	}
	ids := make([]int64, len(m.events))
	shown := make([]eventJSON, 0, digestShown)
	for i, e := range m.events {
		ids[i] = e.ID
		if i < digestShown {
			shown = append(shown, toEventJSON(e, base))
		}
	}
	b, _ := json.Marshal(struct {
		ID       string      `json:"id"`
		Kind     string      `json:"kind"`
		Severity string      `json:"severity"`
		Count    int         `json:"count"`
		EventIDs []int64     `json:"eventIds"`
		Events   []eventJSON `json:"events"`
	}{m.id, "digest", m.severity(), len(m.events), ids, shown})
	return b
}

// request builds the HTTP request of an HTTP target (every kind but smtp).
func (m message) request(t store.NotifyTarget, secret []byte, base string, now time.Time) (*http.Request, error) {
	var (
		body []byte
		url  = t.Endpoint
		hdr  = http.Header{}
	)
	hdr.Set("Content-Type", "application/json")
	switch t.Kind {
	case KindWebhook:
		body = m.webhookBody(base)
		hdr.Set(SignatureHeader, Sign(secret, now, body))
	case KindSlack:
		// Slack's incoming webhooks: text in mrkdwn.
		body, _ = json.Marshal(map[string]string{"text": slackEscape("*" + m.title() + "*\n" + m.text(base))})
	case KindTeams:
		// Teams' incoming webhooks (Workflows) take an Adaptive Card.
		card := map[string]any{
			"type": "AdaptiveCard", "version": "1.4", "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
			"body": []any{
				map[string]any{"type": "TextBlock", "size": "Medium", "weight": "Bolder", "wrap": true, "text": m.title(),
					"color": map[string]string{SeverityCritical: "Attention", SeverityError: "Attention", SeverityWarning: "Warning"}[m.severity()]},
				map[string]any{"type": "TextBlock", "wrap": true, "text": m.text(base)},
			},
		}
		if !m.digest() && m.events[0].Link != "" {
			card["actions"] = []any{map[string]any{"type": "Action.OpenUrl", "title": "Open in vmgate", "url": base + m.events[0].Link}}
		}
		body, _ = json.Marshal(map[string]any{"type": "message", "attachments": []any{
			map[string]any{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}}})
	case KindNtfy:
		// ntfy: the body is the message; title, priority, tags and click in headers.
		body = []byte(m.text(base))
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		hdr.Set("Title", headerText(m.title()))
		hdr.Set("Priority", strconv.Itoa(ntfyPriority(m.severity())))
		tags := "vmgate," + m.severity()
		if !m.digest() {
			tags += "," + m.events[0].Kind
		}
		hdr.Set("Tags", tags)
		if !m.digest() && m.events[0].Link != "" && base != "" {
			hdr.Set("Click", base+m.events[0].Link)
		}
		if len(secret) > 0 {
			hdr.Set("Authorization", "Bearer "+string(secret))
		}
	case KindGotify:
		url = strings.TrimRight(t.Endpoint, "/") + "/message"
		msg := map[string]any{"title": m.title(), "message": m.text(base), "priority": gotifyPriority(m.severity())}
		if !m.digest() && m.events[0].Link != "" && base != "" {
			msg["extras"] = map[string]any{"client::notification": map[string]any{"click": map[string]string{"url": base + m.events[0].Link}}}
		}
		body, _ = json.Marshal(msg)
		hdr.Set("X-Gotify-Key", string(secret))
	default:
		return nil, permanent(fmt.Errorf("kind %q is not sent over HTTP", t.Kind))
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, permanent(fmt.Errorf("build the request: %w", err))
	}
	req.Header = hdr
	req.Header.Set("User-Agent", "vmgate-notify/1")
	req.Header.Set(EventIDHeader, m.id)
	return req, nil
}

func ntfyPriority(sev string) int {
	switch sev {
	case SeverityCritical:
		return 5
	case SeverityError, SeverityWarning:
		return 4
	}
	return 3
}

func gotifyPriority(sev string) int {
	switch sev {
	case SeverityCritical:
		return 10
	case SeverityError:
		return 8
	case SeverityWarning:
		return 5
	}
	return 2
}

// slackEscape escapes what Slack's mrkdwn takes as control: &, < and >.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// headerText makes s safe for one header line: control characters dropped,
// anything beyond ASCII encoded as RFC 2047 (which ntfy decodes), bounded.
func headerText(s string) string {
	s = strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) > 200 {
		s = s[:200]
	}
	return mime.QEncoding.Encode("utf-8", s)
}
