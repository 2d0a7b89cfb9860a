package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// ReadPassword reads a password for prompt: without echo from a terminal (the
// prompt on stderr), else one line of stdin with its line ending stripped (DESIGN
// §7's --password-stdin), so that `echo "$PW" | vmgate login` works in scripts.
func ReadPassword(prompt string, stdin *os.File, stderr io.Writer) (string, error) {
	if IsTerminal(stdin) {
		fmt.Fprint(stderr, prompt)
		b, err := term.ReadPassword(int(stdin.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		return string(b), nil
	}
	return ReadLine(stdin)
}

// maxLine bounds what ReadLine takes: a password is at most 1024 bytes, a token
// far less.
const maxLine = 64 << 10

// ReadLine reads one line and strips its line ending. It reads a byte at a time so
// that it takes its line and nothing more: the next command of a script that reads
// the same standard input gets the next line
// (`printf '%s\n' "$PW" "$SECRET" | { vmgate login …; vmgate cluster add …; }`).
// A last line without a line ending counts.
func ReadLine(r io.Reader) (string, error) {
	var line []byte
	one := make([]byte, 1)
	for len(line) <= maxLine {
		n, err := r.Read(one)
		if n == 1 {
			if one[0] == '\n' {
				return strings.TrimRight(string(line), "\r"), nil
			}
			line = append(line, one[0])
			continue
		}
		if err != nil {
			if len(line) == 0 {
				return "", errors.New("nothing on standard input")
			}
			return strings.TrimRight(string(line), "\r"), nil
		}
	}
	return "", fmt.Errorf("a line of more than %d bytes on standard input", maxLine)
}
