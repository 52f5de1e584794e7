package ssh

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// nastyStrings try to break out of a quoted shell word.
var nastyStrings = []string{
	"", "plain", "a b", "'", "''", `"`, `\`, `\'`, `'\''`, "it's", `a'b"c` + "`d$e\\f",
	"$(id)", "`id`", "$HOME", "${HOME}", "$((1+1))", "$'\\n'", "\n", "a\nb", "\r\n", "\t",
	"; echo pwned", "&& echo pwned", "|| echo pwned", "| cat", "&", "> /tmp/x", "< /etc/passwd", "<<EOF",
	"' ; echo pwned ; '", `" ; echo pwned ; "`, "*", "?", "[a]", "{a,b}", "~", "~root", "#comment",
	"!", "!!", "-n", "--", "-e", "%s", "%%", "a=b", "=", "é", "日本語", "💥", "\x01\x7f", "\xff\xfe",
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "''"},
		{"abc", "abc"},
		{"/etc/rancher/k3s/config.yaml", "/etc/rancher/k3s/config.yaml"},
		{"--flag", "--flag"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"a=b", "'a=b'"},
		{"~", "'~'"},
		{"$(id)", "'$(id)'"},
		{"é", "'é'"},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
	if got := Command("mkdir", "-p", "/a b", "it's"); got != `mkdir -p '/a b' 'it'\''s'` {
		t.Errorf("Command = %s", got)
	}
}

func TestQuoteRefusesNUL(t *testing.T) {
	if _, err := QuoteChecked("a\x00b"); !errors.Is(err, ErrNUL) {
		t.Errorf("QuoteChecked with NUL: %v, want ErrNUL", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Quote with NUL did not panic")
		}
	}()
	_ = Quote("a\x00b")
}

// shells are the local shells the quoting is checked against: POSIX sh
// (dash on Debian) and bash, the usual login shell.
func shells(t testing.TB) []string {
	var found []string
	for _, name := range []string{"sh", "bash"} {
		if p, err := exec.LookPath(name); err == nil {
			found = append(found, p)
		}
	}
	if len(found) == 0 {
		t.Skip("no shell")
	}
	return found
}

// checkQuoted runs, in each shell with an empty PATH (so that no external
// command can run), a script that sets the positional parameters to the
// quoted word and prints how many there are and the first, then s via
// printf and via Command: the output must be exactly that, with an empty
// stderr and exit status 0.
func checkQuoted(t *testing.T, shellPaths []string, emptyDir, s string) {
	q, err := QuoteChecked(s)
	if strings.IndexByte(s, 0) >= 0 {
		if !errors.Is(err, ErrNUL) {
			t.Fatalf("QuoteChecked(%q) = %q, %v; want ErrNUL", s, q, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("QuoteChecked(%q): %v", s, err)
	}
	script := "set -- " + q + "\nprintf '%s|' \"$#\" \"$1\"\nprintf '%s' " + q + "\n" + Command("printf", "|%s|", s)
	want := "1|" + s + "|" + s + "|" + s + "|"
	for _, sh := range shellPaths {
		cmd := exec.Command(sh, "-c", script)
		cmd.Env = []string{"PATH=" + emptyDir, "HOME=" + emptyDir}
		cmd.Dir = emptyDir
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil || stdout.String() != want || stderr.Len() != 0 {
			t.Fatalf("%s -c %q:\nstdout %q\nwant   %q\nstderr %q\nerr %v", sh, script, stdout.String(), want, stderr.String(), err)
		}
	}
}

func FuzzQuote(f *testing.F) {
	for _, s := range nastyStrings {
		f.Add(s)
	}
	shellPaths := shells(f)
	emptyDir := f.TempDir()
	f.Fuzz(func(t *testing.T, s string) {
		checkQuoted(t, shellPaths, emptyDir, s)
	})
}
