package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/vmgate/vmgate/client"
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
func Watch(ctx context.Context, c *client.Client, upid string, o WatchOptions) (client.Task, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	view := newProgressView(o.Progress, o.Terminal, upid)
	var last client.Task
	err := follow(ctx, o, "vmgate task watch "+upid, view.notice, func(ctx context.Context, seen func()) (client.StreamEnd, error) {
		return c.TaskEvents(ctx, upid, func(t client.Task) bool {
			seen()
			last = t
			view.show(t)
			return t.Finished()
		})
	})
	view.finish(last)
	return last, err
}

// follow reads an event stream (stream opens it and reads it to its end, calling
// seen with each event) and reconnects when the stream drops before the end —
// vmgate shut down (its `event: shutdown` says when to come back), restarted, or
// the connection broke — with a notice, backoff, and for at most o.GiveUp; again
// says how to follow it later. Errors are vmgate's answers (401, 404) or the
// context's end.
func follow(ctx context.Context, o WatchOptions, again string, notice func(string),
	stream func(ctx context.Context, seen func()) (client.StreamEnd, error)) error {
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
		lostSince time.Time // zero while connected
		backoff   = 250 * time.Millisecond
	)
	for {
		end, err := stream(ctx, func() {
			if !lostSince.IsZero() {
				notice(NoticeReconnected)
				lostSince, backoff = time.Time{}, 250*time.Millisecond
			}
		})
		if end.Ended || end.Done {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ae *client.APIError
		if errors.As(err, &ae) && !retryable(ae.Status) {
			return err
		}
		wait := backoff
		if lostSince.IsZero() {
			lostSince = time.Now()
			if end.Shutdown {
				notice(NoticeRestarted)
			} else {
				notice(NoticeUnreachable)
			}
		}
		if end.Shutdown && end.Retry > 0 {
			wait = end.Retry
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

// progressView draws a task as it goes: a bar for a migration on a terminal, a
// line per state change (and per tenth of a migration) otherwise.
type progressView struct {
	out       io.Writer
	terminal  bool
	upid      string
	bar       *progressbar.ProgressBar
	lastLine  string
	lastStep  int    // the last tenth printed, for plain output
	lastPhase string // the last phase printed: a container's move stays at 0 % through its phases
}

func newProgressView(out io.Writer, terminal bool, upid string) *progressView {
	return &progressView{out: out, terminal: terminal, upid: upid, lastStep: -1}
}

// barMax is the bar's scale: tenths of a percent.
const barMax = 1000

func (v *progressView) show(t client.Task) {
	if t.Progress != nil && v.terminal {
		if v.bar == nil {
			v.bar = progressbar.NewOptions(barMax,
				progressbar.OptionSetWriter(v.out),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(100*time.Millisecond),
			)
		}
		v.bar.Describe(Escape(barText(t)))
		if t.Finished() {
			return // finish draws the last state
		}
		// Short of the end the bar stays below 100 %: the bar library ends at
		// its maximum, and only the task's end may do that.
		v.bar.Set(min(int(t.Progress.Percent*10), barMax-1))
		return
	}
	if t.Progress != nil {
		step := int(t.Progress.Percent / 10)
		if t.Finished() && t.Result == "ok" {
			step = 10
		}
		if step != v.lastStep || phaseWord(t) != v.lastPhase {
			v.lastStep, v.lastPhase = step, phaseWord(t)
			line := fmt.Sprintf("%s → %s: %3.0f%% %s", describeGuest(t), t.TargetNode(), t.Progress.Percent, phaseWord(t))
			if t.Progress.TotalBytes > 0 {
				line += fmt.Sprintf(", %s of %s at %s/s", HumanBytes(t.Progress.TransferredBytes),
					HumanBytes(t.Progress.TotalBytes), HumanBytes(t.Progress.BytesPerSecond))
			}
			writeLine(v.out, line)
		}
		return
	}
	if line := t.Status + " " + t.Result; line != v.lastLine {
		writeLine(v.out, fmt.Sprintf("%s %s: %s", taskWord(t), describeGuest(t), line))
		v.lastLine = line
	}
}

// barText is the description beside a migration's bar.
func barText(t client.Task) string {
	rate := " " + HumanBytes(t.Progress.BytesPerSecond) + "/s"
	if t.Progress.TotalBytes == 0 || t.Finished() {
		rate = "" // a container's move: PVE's log counts no bytes; at the end the summary says PVE's average
	}
	return fmt.Sprintf("%s → %s [%s]%s", describeGuest(t), t.TargetNode(), phaseWord(t), rate)
}

// phaseWord is a migration's phase as the view shows it: "done" only once the
// task ended well, "failed" once it failed.
func phaseWord(t client.Task) string {
	switch {
	case t.Finished() && t.Result == "ok", t.Finished() && t.Result == "warnings":
		return "done"
	case t.Finished():
		return "failed"
	case t.Progress.Phase == "done":
		return "completing" // PVE logged its last line; the task has not ended yet
	}
	return t.Progress.Phase
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

// finish draws the bar's last state: full and "done" when the task ended well,
// where it stood otherwise; the bar's line stays on the screen.
func (v *progressView) finish(last client.Task) {
	if v.bar == nil {
		return
	}
	if last.Finished() && (last.Result == "ok" || last.Result == "warnings") {
		v.bar.Finish() // full, 100 %
	} else {
		v.bar.Exit()
	}
	io.WriteString(v.out, "\n")
	v.bar = nil
}

func describeGuest(t client.Task) string {
	if t.GuestID() == 0 {
		return t.UPID()
	}
	if t.Kind() == client.LXC {
		return "CT " + strconv.FormatInt(t.GuestID(), 10)
	}
	return "VM " + strconv.FormatInt(t.GuestID(), 10)
}

// taskWord is what a task does, in vmgate's words where it has them.
func taskWord(t client.Task) string {
	if op := t.Operation(); op != "" {
		return op
	}
	return t.Type
}

// avgSpeedRe finds qemu-server's last line of a migration:
// "average migration speed: 292.6 MiB/s - downtime 61 ms".
var avgSpeedRe = regexp.MustCompile(`average migration speed: ([0-9]+(?:\.[0-9]+)? (?:B|KiB|MiB|GiB|TiB|PiB)/s)`)

// PVERate is the average rate PVE's log gives for a migration ("292.6 MiB/s"),
// "" when it gives none (a container's move, an offline migration).
func PVERate(lines []client.TaskLogLine) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if m := avgSpeedRe.FindStringSubmatch(lines[i].T); m != nil {
			return m[1]
		}
	}
	return ""
}

// Summary is the last line of a finished task: for a migration, its target, how
// long it took and PVE's own average rate (pveRate, from its log; "" for none);
// for others, the result and how long.
func Summary(t client.Task, pveRate string) string {
	took := ""
	if t.EndTime != nil {
		took = HumanDuration(t.EndTime.Sub(t.StartTime))
	}
	exit := ""
	if t.Exit() != "" && t.Exit() != "OK" {
		exit = " (" + t.Exit() + ")"
	}
	if t.Result == "failed" {
		why := t.ErrorLine()
		if why == "" {
			why = t.Exit()
		}
		what := taskWord(t)
		if t.IsMigration {
			what = "migration to " + t.TargetNode()
		}
		if took != "" {
			return fmt.Sprintf("%s: %s failed after %s: %s", describeGuest(t), what, took, why)
		}
		return fmt.Sprintf("%s: %s failed: %s", describeGuest(t), what, why)
	}
	if t.IsMigration && t.TargetNode() != "" {
		line := fmt.Sprintf("%s migrated to %s", describeGuest(t), t.TargetNode())
		if took != "" {
			line += " in " + took
		}
		if pveRate != "" {
			line += " (avg " + pveRate + ")"
		}
		return line + exit
	}
	line := fmt.Sprintf("%s %s: %s", taskWord(t), describeGuest(t), t.Result)
	if took != "" {
		line += " in " + took
	}
	return line + exit
}
