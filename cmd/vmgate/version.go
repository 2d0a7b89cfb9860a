package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at release time with -ldflags "-X main.version=v1.2.3 -X main.commit=… -X main.buildDate=…"
// (scripts/release.sh does). Without them, the Go build info supplies the commit and
// its time: `go build` in a git checkout stamps them; `go run` does not.
var (
	version   = "dev"
	commit    = ""
	buildDate = ""
)

// buildInfo is what `vmgate version` prints.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified"` // built from a work tree with uncommitted changes
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// currentBuild combines the -ldflags values with the build info Go embeds.
func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, BuildDate: buildDate,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.BuildDate == "" {
					b.BuildDate = s.Value
				}
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
		if b.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version // go install module@version
		}
	}
	return b
}

// String is the one-line form: "vmgate v1.2.3 (commit 0123abcd, built 2026-11-24T10:00:00Z, go1.26.8 linux/amd64)".
func (b buildInfo) String() string {
	commit, suffix, _ := strings.Cut(b.Commit, "+") // release.sh marks a dirty tree "<hash>+modified"
	switch {
	case commit == "":
		commit = "unknown (built without VCS information, e.g. go run)"
	case len(commit) > 12:
		commit = commit[:12]
	}
	if suffix != "" {
		commit += "+" + suffix
	} else if b.Modified {
		commit += "+modified"
	}
	var parts []string
	parts = append(parts, "commit "+commit)
	if b.BuildDate != "" {
		parts = append(parts, "built "+b.BuildDate)
	}
	parts = append(parts, b.GoVersion+" "+b.Platform)
	return fmt.Sprintf("vmgate %s (%s)", b.Version, strings.Join(parts, ", "))
}
