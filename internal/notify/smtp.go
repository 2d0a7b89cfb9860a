package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/smtp"
	"net/textproto"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// sendMail sends m as a plain-text mail: over STARTTLS, which must be offered
// (smtp://), or implicit TLS (smtps://). A 5xx reply is permanent, a 4xx one
// worth a retry.
func (s *Sender) sendMail(ctx context.Context, t store.NotifyTarget, secret []byte, m message) outcome {
	e, err := parseSMTP(t.Endpoint)
	if err != nil {
		return outcome{err: permanent(err)}
	}
	addr := net.JoinHostPort(e.host, e.port)
	conn, err := s.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return outcome{err: fmt.Errorf("connect to %s: %w", addr, err)}
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	tlsConf := &tls.Config{ServerName: e.host, RootCAs: s.rootCAs, MinVersion: tls.VersionTLS12}
	if e.implicitTLS {
		conn = tls.Client(conn, tlsConf)
	}
	c, err := smtp.NewClient(conn, e.host)
	if err != nil {
		return smtpOutcome("greeting", err)
	}
	defer c.Close()
	if err := c.Hello("vmgate"); err != nil {
		return smtpOutcome("EHLO", err)
	}
	if !e.implicitTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return outcome{err: permanent(errors.New("the SMTP server does not offer STARTTLS; vmgate sends no mail in the clear"))}
		}
		if err := c.StartTLS(tlsConf); err != nil {
			return smtpOutcome("STARTTLS", err)
		}
	}
	if e.user != "" {
		if err := c.Auth(smtp.PlainAuth("", e.user, string(secret), e.host)); err != nil {
			return smtpOutcome("AUTH", err)
		}
	}
	if err := c.Mail(e.from); err != nil {
		return smtpOutcome("MAIL FROM", err)
	}
	for _, to := range e.to {
		if err := c.Rcpt(to); err != nil {
			return smtpOutcome("RCPT TO "+to, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return smtpOutcome("DATA", err)
	}
	if _, err := w.Write(s.mailText(e, m)); err != nil {
		return smtpOutcome("DATA", err)
	}
	if err := w.Close(); err != nil {
		return smtpOutcome("DATA", err)
	}
	_ = c.Quit()
	return outcome{status: 250}
}

// mailText is the mail: headers (none of them carrying a line break from an
// event) and the text, CRLF line ends.
func (s *Sender) mailText(e smtpEndpoint, m message) []byte {
	var b strings.Builder
	now := s.now().UTC()
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	h("From", e.from)
	h("To", strings.Join(e.to, ", "))
	h("Subject", headerText(m.title()))
	h("Date", now.Format(time.RFC1123Z))
	h("Message-ID", "<"+m.id+"."+fmt.Sprint(now.UnixNano())+"@vmgate>")
	h(EventIDHeader, m.id)
	h("MIME-Version", "1.0")
	h("Content-Type", "text/plain; charset=utf-8")
	h("Content-Transfer-Encoding", "8bit")
	b.WriteString("\r\n")
	// The DATA writer dot-stuffs the lines itself.
	for _, line := range strings.Split(strings.TrimRight(m.text(s.baseURL), "\n"), "\n") {
		b.WriteString(line + "\r\n")
	}
	return []byte(b.String())
}

func smtpOutcome(step string, err error) outcome {
	var te *textproto.Error
	if errors.As(err, &te) {
		err = fmt.Errorf("%s: %d %s", step, te.Code, te.Msg)
		if te.Code >= 500 {
			return outcome{status: te.Code, err: permanent(err)}
		}
		return outcome{status: te.Code, err: err}
	}
	return outcome{err: fmt.Errorf("%s: %w", step, err)}
}
