package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// WatchOptions tune Watch. The zero value prints plain lines to nowhere.
type WatchOptions struct {
	// Progress receives the progress: a bar on a terminal (Terminal), otherwise a
	// line per state and per tenth of a migration.
	Progress io.Writer
	Terminal bool
	// GiveUp bounds how long Watch keeps reconnecting to a vmgate that went away
	// (default 5 min); the task goes on in any case.
	GiveUp time.Duration
	// MaxBackoff caps the wait between reconnections (default 5 s).
	MaxBackoff time.Duration
}

// Reconnect notices, as a person reads them.
const (
	NoticeRestarted   = "vmgate restarted, reconnecting…"
	NoticeUnreachable = "lost the connection to vmgate, reconnecting…"
	NoticeReconnected = "reconnected"
)

// Watch follows a task to its end through its event stream and returns the last
// snapshot. When the stream drops before the end — vmgate shut down (its `event:
// shutdown` says when to come back), restarted, or the connection broke — it says
// so on Progress and reconnects with backoff until GiveUp, and the drawing goes on
// where it was: the task runs on in PVE and vmgate whatever happens to the stream.
// Errors are vmgate's answers (401, 404) or the context's end.
func (c *Client) Watch(ctx context.Context, upid string, o WatchOptions) (Task, error) {
	view := newProgressView(o.Progress, o.Terminal, upid)
	var last Task
	err := c.follow(ctx, TaskPath(upid)+"/events", "task", o, "vmgate task watch "+upid, view.notice,
		func(data []byte) (bool, error) {
			var t Task
			if err := json.Unmarshal(data, &t); err != nil {
				return false, fmt.Errorf("task events: %w", err)
			}
			last = t
			view.show(t)
			return t.Status == "stopped", nil
		})
	view.finish()
	return last, err
}

// follow reads the event stream at path to its end, handing each event named
// name to each (which says whether the data is final), and reconnects when the
// stream drops before the end — vmgate shut down (its `event: shutdown` says when
// to come back), restarted, or the connection broke — with a notice, backoff, and
// for at most o.GiveUp; again says how to follow it later. Errors are vmgate's
// answers (401, 404) or the context's end.
func (c *Client) follow(ctx context.Context, path, name string, o WatchOptions, again string, notice func(string),
	each func(data []byte) (final bool, err error)) error {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.GiveUp <= 0 {
		o.GiveUp = 5 * time.Minute
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	var (
		final     bool
		lostSince time.Time // zero while connected
		backoff   = 250 * time.Millisecond
	)
	for {
		end, err := c.streamEvents(ctx, path, name, func(data []byte) error {
			if !lostSince.IsZero() {
				notice(NoticeReconnected)
				lostSince, backoff = time.Time{}, 250*time.Millisecond
			}
			f, err := each(data)
			final = f
			return err
		})
		if end.ended || final {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ae *APIError
		if errors.As(err, &ae) && !retryable(ae.Status) {
			return err
		}
		wait := backoff
		if lostSince.IsZero() {
			lostSince = time.Now()
			if end.shutdown {
				notice(NoticeRestarted)
			} else {
				notice(NoticeUnreachable)
			}
		}
		if end.shutdown && end.retry > 0 {
			wait = end.retry
		}
		if time.Since(lostSince) > o.GiveUp {
			return &ExitError{Code: ExitUnavailable, Err: err,
				Msg:  fmt.Sprintf("vmgate did not come back within %s; it goes on", HumanDuration(o.GiveUp)),
				Hint: "follow it later with: " + again}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(backoff*2, o.MaxBackoff)
	}
}

// retryable reports whether an answer of vmgate while (re)opening a stream means
// "not now" rather than "never": the store or PVE unavailable, a proxy's 502.
func retryable(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable ||
		status == http.StatusGatewayTimeout || status == http.StatusTooManyRequests
}

// streamEnd says how a stream ended.
type streamEnd struct {
	ended    bool          // event: end, the task is over
	shutdown bool          // event: shutdown, vmgate is going away
	retry    time.Duration // when to come back (the shutdown's retryMs, or the SSE retry field)
}

// streamEvents reads the event stream at path until it ends, calling each with
// the data of every event named name.
func (c *Client) streamEvents(ctx context.Context, path, name string, each func(data []byte) error) (streamEnd, error) {
	var end streamEnd
	resp, err := c.openStream(ctx, path)
	if err != nil {
		return end, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	event, data := "", ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"): // a comment: keep-alive
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		case strings.HasPrefix(line, "retry:"):
			if ms, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "retry:"))); err == nil && ms >= 0 {
				end.retry = time.Duration(ms) * time.Millisecond
			}
		case line == "":
			switch event {
			case name:
				if err := each([]byte(data)); err != nil {
					return end, err
				}
			case "end":
				end.ended = true
				return end, nil
			case "shutdown":
				end.shutdown = true
				var s struct {
					RetryMs int64 `json:"retryMs"`
				}
				if json.Unmarshal([]byte(data), &s) == nil && s.RetryMs > 0 {
					end.retry = time.Duration(s.RetryMs) * time.Millisecond
				}
				return end, io.ErrUnexpectedEOF
			}
			event, data = "", ""
		}
	}
	if err := sc.Err(); err != nil {
		return end, err
	}
	return end, io.ErrUnexpectedEOF // the stream ended without its end
}

// openStream opens the event stream, retrying once with a renewed token after an
// answer 401; an answer other than 200 comes back as *APIError.
func (c *Client) openStream(ctx context.Context, path string) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/event-stream")
		c.authorize(req)
		stream := *c.HTTP
		stream.Timeout = 0 // the stream lasts as long as what it follows
		resp, err := stream.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			return resp, nil
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		ae := &APIError{Status: resp.StatusCode, Header: resp.Header, Body: map[string]any{}}
		json.Unmarshal(raw, &ae.Body)
		ae.Reason, _ = ae.Body["reason"].(string)
		ae.Message, _ = ae.Body["message"].(string)
		if attempt == 0 && resp.StatusCode == http.StatusUnauthorized && c.Renew != nil {
			if tok, ok := c.Renew(ctx); ok {
				c.Token = tok
				continue
			}
		}
		return nil, ae
	}
}

// progressView draws a task as it goes: a bar for a migration on a terminal, a
// line per state change (and per tenth of a migration) otherwise.
type progressView struct {
	out      io.Writer
	terminal bool
	upid     string
	bar      *progressbar.ProgressBar
	lastLine string
	lastStep int // the last tenth printed, for plain output
}

func newProgressView(out io.Writer, terminal bool, upid string) *progressView {
	return &progressView{out: out, terminal: terminal, upid: upid, lastStep: -1}
}

func (v *progressView) show(t Task) {
	if t.Progress != nil && v.terminal {
		if v.bar == nil {
			v.bar = progressbar.NewOptions(1000,
				progressbar.OptionSetWriter(v.out),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish(),
			)
		}
		rate := " " + HumanBytes(t.Progress.BytesPerSecond) + "/s"
		if t.Progress.TotalBytes == 0 {
			rate = "" // a container's move: PVE's log counts no bytes
		}
		v.bar.Describe(Escape(fmt.Sprintf("%s → %s [%s]%s", describeVM(t), t.Target, t.Progress.Phase, rate)))
		v.bar.Set(int(t.Progress.Percent * 10))
		return
	}
	if t.Progress != nil {
		step := int(t.Progress.Percent / 10)
		if step != v.lastStep {
			v.lastStep = step
			line := fmt.Sprintf("%s → %s: %3.0f%% %s", describeVM(t), t.Target, t.Progress.Percent, t.Progress.Phase)
			if t.Progress.TotalBytes > 0 {
				line += fmt.Sprintf(", %s of %s at %s/s", HumanBytes(t.Progress.TransferredBytes),
					HumanBytes(t.Progress.TotalBytes), HumanBytes(t.Progress.BytesPerSecond))
			}
			writeLine(v.out, line)
		}
		return
	}
	if line := t.Status + " " + t.Result; line != v.lastLine {
		writeLine(v.out, fmt.Sprintf("%s %s: %s", t.Type, describeVM(t), line))
		v.lastLine = line
	}
}

// notice prints a line of its own, under the bar's line when there is one.
func (v *progressView) notice(msg string) {
	if v.bar != nil {
		v.bar.Clear()
	}
	writeLine(v.out, msg)
}

// writeLine writes s escaped (Escape) and a line end: the views write to the
// terminal itself, their own redrawing sequences included, so each value they
// show is escaped on its way.
func writeLine(w io.Writer, s string) {
	io.WriteString(w, Escape(s)+"\n")
}

func (v *progressView) finish() {
	if v.bar != nil {
		v.bar.Finish()
		v.bar = nil
	}
}

func describeVM(t Task) string {
	if t.VMID == 0 {
		return t.TaskID
	}
	if t.GuestKind == "lxc" {
		return "CT " + strconv.FormatInt(t.VMID, 10)
	}
	return "VM " + strconv.FormatInt(t.VMID, 10)
}

// Summary is the last line of a finished task: for a migration, its target, how
// long it took and its average rate; for others, the result and how long.
func Summary(t Task) string {
	took := ""
	if t.StartTime != nil && t.EndTime != nil {
		took = HumanDuration(t.EndTime.Sub(*t.StartTime))
	}
	exit := ""
	if t.ExitStatus != nil && *t.ExitStatus != "OK" {
		exit = " (" + *t.ExitStatus + ")"
	}
	if t.Result == "failed" {
		why := t.Error
		if why == "" && t.ExitStatus != nil {
			why = *t.ExitStatus
		}
		what := t.Op
		if what == "" {
			what = t.Type
		}
		if t.IsMigration {
			what = "migration to " + t.Target
		}
		if took != "" {
			return fmt.Sprintf("%s: %s failed after %s: %s", describeVM(t), what, took, why)
		}
		return fmt.Sprintf("%s: %s failed: %s", describeVM(t), what, why)
	}
	if t.IsMigration && t.Target != "" {
		line := fmt.Sprintf("%s migrated to %s", describeVM(t), t.Target)
		if took != "" {
			line += " in " + took
			if t.Progress != nil && t.EndTime.Sub(*t.StartTime) > 0 {
				moved := t.Progress.TransferredBytes
				if moved <= 0 {
					moved = t.Progress.TotalBytes
				}
				if moved > 0 {
					rate := float64(moved) / t.EndTime.Sub(*t.StartTime).Seconds()
					line += fmt.Sprintf(" (avg %s/s)", HumanBytes(int64(rate)))
				}
			}
		}
		return line + exit
	}
	line := fmt.Sprintf("%s %s: %s", t.Type, describeVM(t), t.Result)
	if took != "" {
		line += " in " + took
	}
	return line + exit
}
