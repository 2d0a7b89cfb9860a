package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
)

// Shell completion is generated from kong's model of the command line, so it
// cannot drift from it: every command, every flag (with its parents'), and the
// values of enum flags and arguments. The scripts complete a command path word by
// word, flags when the word starts with "-", and the values after an enum flag.

// Shells are the shells Completion writes a script for.
var Shells = []string{"bash", "zsh", "fish"}

// completionNode is one command of the tree, as the scripts need it.
type completionNode struct {
	path   string              // "vm migrate"; "" for the root
	subs   []string            // its subcommands
	flags  []string            // --long and -s, its own and its parents'
	values map[string][]string // a flag's (or "" for the next argument's) enum values
}

// completionTree walks the model depth first.
func completionTree(app *kong.Application) []completionNode {
	var out []completionNode
	var walk func(n *kong.Node, path string)
	walk = func(n *kong.Node, path string) {
		cn := completionNode{path: path, values: map[string][]string{}}
		for _, c := range n.Children {
			if c.Hidden || c.Type != kong.CommandNode {
				continue
			}
			cn.subs = append(cn.subs, c.Name)
			cn.subs = append(cn.subs, c.Aliases...)
		}
		for p := n; p != nil; p = p.Parent {
			for _, f := range p.Flags {
				if f.Hidden {
					continue
				}
				names := []string{"--" + f.Name}
				if f.Short != 0 {
					names = append(names, "-"+string(f.Short))
				}
				for _, a := range f.Aliases {
					names = append(names, "--"+a)
				}
				cn.flags = append(cn.flags, names...)
				if vals := enumValues(f.Value); len(vals) > 0 {
					for _, name := range names {
						cn.values[name] = vals
					}
				}
			}
		}
		for _, pos := range n.Positional {
			if vals := enumValues(pos); len(vals) > 0 {
				cn.values[""] = vals
				break
			}
		}
		sort.Strings(cn.flags)
		out = append(out, cn)
		for _, c := range n.Children {
			if c.Hidden || c.Type != kong.CommandNode {
				continue
			}
			walk(c, strings.TrimSpace(path+" "+c.Name))
		}
	}
	walk(app.Node, "")
	return out
}

// enumValues are the values of an enum flag or argument, the empty one left out.
func enumValues(v *kong.Value) []string {
	if v == nil || v.Enum == "" {
		return nil
	}
	var out []string
	for _, e := range v.EnumSlice() {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// Completion writes the completion script of shell for the command line app.
func Completion(shell string, app *kong.Application) (string, error) {
	tree := completionTree(app)
	name := app.Name
	fn := "_" + strings.ReplaceAll(name, "-", "_")
	switch shell {
	case "bash":
		return bashCompletion(name, fn, tree), nil
	case "zsh":
		return zshCompletion(name, fn, tree), nil
	case "fish":
		return fishCompletion(name, fn, tree), nil
	}
	return "", UsageErrorf("no completion for %q: want one of %s", shell, strings.Join(Shells, ", "))
}

// shellCase writes a case arm per node: `"path") echo "words";;` in sh syntax.
func shellCase(tree []completionNode, words func(completionNode) []string) string {
	var b strings.Builder
	for _, n := range tree {
		if w := words(n); len(w) > 0 {
			fmt.Fprintf(&b, "    %q) echo %q ;;\n", n.path, strings.Join(w, " "))
		}
	}
	return b.String()
}

// valueCase writes a case arm per (path, flag) with enum values: `"path|--flag")`.
func valueCase(tree []completionNode) string {
	var b strings.Builder
	for _, n := range tree {
		keys := make([]string, 0, len(n.values))
		for k := range n.values {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "    %q) echo %q ;;\n", n.path+"|"+k, strings.Join(n.values[k], " "))
		}
	}
	return b.String()
}

func bashCompletion(name, fn string, tree []completionNode) string {
	subs := func(n completionNode) []string { return n.subs }
	flags := func(n completionNode) []string { return n.flags }
	return fmt.Sprintf(`# bash completion for %[1]s, generated from its command line: %[1]s completion bash
%[2]s_subs() {
  case "$1" in
%[3]s  esac
}
%[2]s_flags() {
  case "$1" in
%[4]s  esac
}
%[2]s_values() {
  case "$1" in
%[5]s  esac
}
%[2]s() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev="" cmdpath="" w i vals
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    if [[ " $(%[2]s_subs "$cmdpath") " == *" $w "* ]]; then
      cmdpath="${cmdpath:+$cmdpath }$w"
    fi
  done
  ((COMP_CWORD > 1)) && prev="${COMP_WORDS[COMP_CWORD-1]}"
  vals="$(%[2]s_values "$cmdpath|$prev")"
  if [[ -n "$vals" && "$prev" == -* ]]; then
    COMPREPLY=($(compgen -W "$vals" -- "$cur"))
  elif [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(%[2]s_flags "$cmdpath")" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(%[2]s_subs "$cmdpath") $(%[2]s_values "$cmdpath|")" -- "$cur"))
  fi
}
complete -F %[2]s %[1]s
`, name, fn, shellCase(tree, subs), shellCase(tree, flags), valueCase(tree))
}

func zshCompletion(name, fn string, tree []completionNode) string {
	subs := func(n completionNode) []string { return n.subs }
	flags := func(n completionNode) []string { return n.flags }
	return fmt.Sprintf(`#compdef %[1]s
# zsh completion for %[1]s, generated from its command line: %[1]s completion zsh
%[2]s_subs() {
  case "$1" in
%[3]s  esac
}
%[2]s_flags() {
  case "$1" in
%[4]s  esac
}
%[2]s_values() {
  case "$1" in
%[5]s  esac
}
%[2]s() {
  local cmdpath="" w i prev="" vals
  for ((i = 2; i < CURRENT; i++)); do
    w="${words[i]}"
    if [[ " $(%[2]s_subs "$cmdpath") " == *" $w "* ]]; then
      cmdpath="${cmdpath:+$cmdpath }$w"
    fi
  done
  ((CURRENT > 2)) && prev="${words[CURRENT-1]}"
  vals="$(%[2]s_values "$cmdpath|$prev")"
  if [[ -n "$vals" && "$prev" == -* ]]; then
    compadd -- ${=vals}
  elif [[ "$PREFIX" == -* ]]; then
    compadd -- ${=$(%[2]s_flags "$cmdpath")}
  else
    compadd -- ${=$(%[2]s_subs "$cmdpath")} ${=$(%[2]s_values "$cmdpath|")}
  fi
}
if [[ "$funcstack[1]" == "%[2]s" ]]; then
  %[2]s "$@"
else
  compdef %[2]s %[1]s
fi
`, name, fn, shellCase(tree, subs), shellCase(tree, flags), valueCase(tree))
}

func fishCompletion(name, fn string, tree []completionNode) string {
	var subs, flags, values strings.Builder
	for _, n := range tree {
		if len(n.subs) > 0 {
			fmt.Fprintf(&subs, "    case %s\n        printf '%%s\\n' %s\n", fishQuote(n.path), strings.Join(n.subs, " "))
		}
		if len(n.flags) > 0 {
			fmt.Fprintf(&flags, "    case %s\n        printf '%%s\\n' %s\n", fishQuote(n.path), strings.Join(n.flags, " "))
		}
		keys := make([]string, 0, len(n.values))
		for k := range n.values {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&values, "    case %s\n        printf '%%s\\n' %s\n", fishQuote(n.path+"|"+k), strings.Join(n.values[k], " "))
		}
	}
	return fmt.Sprintf(`# fish completion for %[1]s, generated from its command line: %[1]s completion fish
function %[2]s_subs
    switch $argv[1]
%[3]s    end
end
function %[2]s_flags
    switch $argv[1]
%[4]s    end
end
function %[2]s_values
    switch $argv[1]
%[5]s    end
end
function %[2]s_path
    set -l words (commandline -opc)
    set -l p ''
    for w in $words[2..-1]
        if contains -- $w (%[2]s_subs "$p")
            set p (string trim -- "$p $w")
        end
    end
    echo $p
end
function %[2]s_complete
    set -l p (%[2]s_path)
    set -l cur (commandline -ct)
    set -l words (commandline -opc)
    set -l prev $words[-1]
    set -l vals (%[2]s_values "$p|$prev")
    if test (count $vals) -gt 0; and string match -q -- '-*' $prev
        printf '%%s\n' $vals
    else if string match -q -- '-*' $cur
        %[2]s_flags "$p"
    else
        %[2]s_subs "$p"
        %[2]s_values "$p|"
    end
end
complete -c %[1]s -f -a '(%[2]s_complete)'
`, name, fn, subs.String(), flags.String(), values.String())
}

// fishQuote quotes s for a fish switch case.
func fishQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
