package pvesim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

func itoa(i int) string { return strconv.Itoa(i) }

// renderBytes is PVE::Format::render_bytes($v, 1): 1024-based units, one decimal.
func renderBytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	unit := 0
	if v > 1023 {
		unit = int(math.Log(v) / math.Log(1024))
		if unit >= len(units) {
			unit = len(units) - 1
		}
		v /= math.Pow(1024, float64(unit))
	}
	return fmt.Sprintf("%.1f %s", v, units[unit])
}

// renderDuration is PVE::Format::render_duration without accuracy limiting:
// "1m 1s", "0s".
func renderDuration(d time.Duration) string {
	rest := int64(math.Round(d.Seconds()))
	if rest == 0 {
		return "0s"
	}
	var parts []string
	for _, u := range []struct {
		name string
		len  int64
	}{{"w", 7 * 24 * 3600}, {"d", 24 * 3600}, {"h", 3600}, {"m", 60}, {"s", 1}} {
		if v := rest / u.len; v > 0 {
			parts = append(parts, fmt.Sprintf("%d%s", v, u.name))
			rest -= v * u.len
		}
	}
	return strings.Join(parts, " ")
}

// hms is AbstractMigrate's "%02d:%02d:%02d" duration.
func hms(d time.Duration) string {
	s := int64(d / time.Second)
	return fmt.Sprintf("%02d:%02d:%02d", s/3600, (s/60)%60, s%60)
}

// roundPowerOf2 is QemuMigrate::round_powerof2.
func roundPowerOf2(v int64) int64 {
	if v < 2 {
		return 1
	}
	return 2 << int(math.Log(float64(v-1))/math.Log(2))
}

// logTime is the "%F %H:%M:%S" prefix of migration log lines.
func logTime(t time.Time) string { return t.Format("2006-01-02 15:04:05") }

// sha1Hex is the hex SHA-1 PVE's config parsers report as a digest.
func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
