package notify_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/store"
)

// TestFormats: each kind gets its receiver's own format.
func TestFormats(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind, secret, path string
		check              func(t *testing.T, hdr map[string]string, body map[string]any, raw string)
	}{
		{notify.KindSlack, "", "/services/T/B/X", func(t *testing.T, _ map[string]string, b map[string]any, _ string) {
			if text, _ := b["text"].(string); !strings.Contains(text, "*vmgate error: event 0*") || !strings.Contains(text, "https://vmgate.example/fleet") {
				t.Errorf("slack text: %q", text)
			}
		}},
		{notify.KindTeams, "", "/workflows/x", func(t *testing.T, _ map[string]string, b map[string]any, raw string) {
			if b["type"] != "message" || !strings.Contains(raw, "application/vnd.microsoft.card.adaptive") ||
				!strings.Contains(raw, `"Action.OpenUrl"`) || !strings.Contains(raw, "https://vmgate.example/fleet") {
				t.Errorf("teams body: %s", raw)
			}
		}},
		{notify.KindNtfy, "tk_ntfy", "/vmgate-alerts", func(t *testing.T, h map[string]string, _ map[string]any, raw string) {
			if h["Title"] != "vmgate error: event 0" || h["Priority"] != "4" || !strings.Contains(h["Tags"], notify.EventNodeOffline) ||
				h["Click"] != "https://vmgate.example/fleet" || h["Authorization"] != "Bearer tk_ntfy" || !strings.Contains(raw, "event 0") {
				t.Errorf("ntfy headers %v body %q", h, raw)
			}
		}},
		{notify.KindGotify, "app-token", "/message", func(t *testing.T, h map[string]string, b map[string]any, _ string) {
			if h["X-Gotify-Key"] != "app-token" || b["title"] != "vmgate error: event 0" || b["priority"] != float64(8) {
				t.Errorf("gotify headers %v body %v", h, b)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			rcv := newReceiver(t, "", e.clock.Now)
			endpoint := rcv.srv.URL + c.path
			if c.kind == notify.KindGotify {
				endpoint = rcv.srv.URL
			}
			e.target(notify.TargetSpec{Name: c.kind, Kind: c.kind, Endpoint: endpoint, Secret: c.secret})
			e.events(1, notify.EventNodeOffline, notify.SeverityError)
			e.step()
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			if len(rcv.bodies) != 1 || rcv.paths[0] != c.path {
				t.Fatalf("got %d requests (paths %v)", len(rcv.bodies), rcv.paths)
			}
			hdr := map[string]string{}
			for k := range rcv.headers[0] {
				hdr[k] = rcv.headers[0].Get(k)
			}
			if hdr[notify.EventIDHeader] == "" {
				t.Error("no event id header")
			}
			var body map[string]any
			if c.kind != notify.KindNtfy {
				body = decode(t, rcv.bodies[0])
			}
			c.check(t, hdr, body, string(rcv.bodies[0]))
		})
	}
}

// mailServer is an SMTP server (emersion/go-smtp) with STARTTLS and PLAIN
// authentication that records the mails it takes and whether TLS carried them.
type mailServer struct {
	addr string
	mu   sync.Mutex
	mail []receivedMail
}

type receivedMail struct {
	from string
	to   []string
	data string
	tls  bool
	user string
}

type mailSession struct {
	srv  *mailServer
	conn *smtp.Conn
	cur  receivedMail
}

func (s *mailSession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *mailSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "vmgate" || pass != "mail-password" {
			return errors.New("bad credentials")
		}
		s.cur.user = user
		return nil
	}), nil
}
func (s *mailSession) Mail(from string, _ *smtp.MailOptions) error { s.cur.from = from; return nil }
func (s *mailSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.cur.to = append(s.cur.to, to)
	return nil
}
func (s *mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.data = string(b)
	_, s.cur.tls = s.conn.TLSConnectionState()
	s.srv.mu.Lock()
	s.srv.mail = append(s.srv.mail, s.cur)
	s.srv.mu.Unlock()
	return nil
}
func (s *mailSession) Reset()        { s.cur = receivedMail{user: s.cur.user} }
func (s *mailSession) Logout() error { return nil }

func newMailServer(t *testing.T) *mailServer {
	ms := &mailServer{}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &mailSession{srv: ms, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.TLSConfig = &tlsConfig
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ms.addr = ln.Addr().String()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ms
}

// TestSMTPOverSTARTTLS (docs/security.md item 44): an SMTP target's mail goes over STARTTLS, authenticated
// with its sealed password, plain text with the event id in a header and no
// line break from an event in its headers.
func TestSMTPOverSTARTTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ms := newMailServer(t)
	_, port, _ := net.SplitHostPort(ms.addr)
	e.target(notify.TargetSpec{Name: "mail", Kind: notify.KindSMTP, Secret: "mail-password",
		Endpoint: "smtp://vmgate@localhost:" + port + "?from=vmgate@example.org&to=ops@example.org,oncall@example.org"})
	if err := e.st.EnqueueNotifications(t.Context(), []store.NotifyEvent{{Kind: notify.EventTaskFailed, Severity: notify.SeverityWarning,
		ClusterID: 1, Subject: "migrate of VM 100 failed\r\nBcc: evil@example.org", Link: "/tasks/7", At: e.clock.Now()}}); err != nil {
		t.Fatal(err)
	}
	e.step()
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if len(ms.mail) != 1 {
		t.Fatalf("%d mails; dead letters: %+v", len(ms.mail), e.deliveries(store.DeliveryDead))
	}
	m := ms.mail[0]
	if !m.tls || m.user != "vmgate" || m.from != "vmgate@example.org" || strings.Join(m.to, ",") != "ops@example.org,oncall@example.org" {
		t.Fatalf("mail: tls %v user %q from %q to %v", m.tls, m.user, m.from, m.to)
	}
	msg, err := mail.ReadMessage(bufio.NewReader(strings.NewReader(m.data)))
	if err != nil {
		t.Fatalf("mail %q: %v", m.data, err)
	}
	if msg.Header.Get("Bcc") != "" || msg.Header.Get(notify.EventIDHeader) == "" ||
		!strings.HasPrefix(msg.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("headers: %v", msg.Header)
	}
	body, _ := io.ReadAll(msg.Body)
	if !strings.Contains(string(body), "https://vmgate.example/tasks/7") {
		t.Errorf("body: %q", body)
	}
}

// TestSMTPWithoutSTARTTLSRefused: a server that offers no STARTTLS gets no
// mail (vmgate sends none in the clear): dead, with the reason.
func TestSMTPWithoutSTARTTLSRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &mailSession{srv: &mailServer{}, conn: c}, nil
	}))
	srv.Domain = "localhost"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	e.target(notify.TargetSpec{Name: "mail", Kind: notify.KindSMTP, Endpoint: "smtp://localhost:" + port + "?from=a@example.org&to=b@example.org"})
	e.events(1, notify.EventNodeOffline, notify.SeverityError)
	e.step()
	dead := e.deliveries(store.DeliveryDead)
	if len(dead) != 1 || !strings.Contains(dead[0].LastError, "STARTTLS") {
		t.Fatalf("dead letters: %+v", dead)
	}
}
