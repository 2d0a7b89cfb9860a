package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Watch follows a task until it ends, drawing a progress bar for migrations and a
// line per state change otherwise. It long-polls, so it costs one request per
// change or per wait period.
func (c *Client) Watch(ctx context.Context, upid string, out io.Writer) (Task, error) {
	var bar *progressbar.ProgressBar
	last := ""
	for {
		t, err := c.Task(ctx, upid, 0, 2)
		if err != nil {
			return t, err
		}
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
		if t.Status == "stopped" {
			if bar != nil {
				bar.Finish()
			}
			return t, nil
		}
		select {
		case <-ctx.Done():
			return t, ctx.Err()
		default:
		}
	}
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
