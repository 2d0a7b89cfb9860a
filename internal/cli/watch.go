package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Watch follows a task until it ends, drawing a progress bar for migrations and a
// line per state change otherwise. It reads the task's event stream, so the bar
// moves as soon as vmgate sees PVE's log move; if the stream breaks it falls back
// to long-polling the task query.
func (c *Client) Watch(ctx context.Context, upid string, out io.Writer) (Task, error) {
	var bar *progressbar.ProgressBar
	last := ""
	show := func(t Task) {
		if t.Progress != nil {
			if bar == nil {
				bar = progressbar.NewOptions(1000,
					progressbar.OptionSetWriter(out),
					progressbar.OptionSetDescription(fmt.Sprintf("%s VM %d → %s", t.Type, t.VMID, t.Target)),
					progressbar.OptionSetWidth(30),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionClearOnFinish(),
				)
			}
			bar.Describe(fmt.Sprintf("%s VM %d → %s [%s] %s/s", t.Type, t.VMID, t.Target, t.Progress.Phase, HumanBytes(t.Progress.BytesPerSecond)))
			bar.Set(int(t.Progress.Percent * 10))
		} else if line := t.Status + " " + t.Result; line != last {
			fmt.Fprintf(out, "%s: %s\n", upid, line)
			last = line
		}
		if t.Status == "stopped" && bar != nil {
			bar.Finish()
		}
	}
	if t, err := c.streamTask(ctx, upid, show); err == nil && t.Status == "stopped" {
		return t, nil
	}
	for {
		t, err := c.Task(ctx, upid, 0, 2)
		if err != nil {
			return t, err
		}
		show(t)
		if t.Status == "stopped" {
			return t, nil
		}
		if err := ctx.Err(); err != nil {
			return t, err
		}
	}
}

// streamTask reads GET /pve/task/{upid}/events until its "end" event and returns
// the last snapshot.
func (c *Client) streamTask(ctx context.Context, upid string, each func(Task)) (Task, error) {
	var last Task
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+TaskPath(upid)+"/events", nil)
	if err != nil {
		return last, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	stream := *c.HTTP
	stream.Timeout = 0 // the stream lasts as long as the task
	resp, err := stream.Do(req)
	if err != nil {
		return last, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return last, fmt.Errorf("task events: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "task":
			var t Task
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &t); err != nil {
				return last, fmt.Errorf("task events: %w", err)
			}
			last = t
			each(t)
		case event == "end" && line == "":
			return last, nil
		}
	}
	if err := sc.Err(); err != nil {
		return last, err
	}
	return last, nil
}

// HumanBytes renders n with 1024-based units, one decimal, as PVE does.
func HumanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v := float64(n)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
