package cli

import (
	"bufio"
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

// ReadLine reads one line and strips its line ending.
func ReadLine(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && line == "" {
		return "", errors.New("nothing on standard input")
	}
	return strings.TrimRight(line, "\r\n"), nil
}
