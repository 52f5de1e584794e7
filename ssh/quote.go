package ssh

import (
	"errors"
	"strings"
)

// ErrNUL is returned by QuoteChecked for a string containing a NUL byte,
// which no shell word and no command line can carry: sshd would cut the
// whole command at the NUL.
var ErrNUL = errors.New("ssh: string contains a NUL byte")

// Quote returns s as one POSIX shell word that the shell turns back into
// exactly s, with no expansion of any kind: s itself when it is not empty
// and made only of letters, digits and @%+:,./_- characters; otherwise s in
// single quotes, with each single quote inside written as quote, backslash,
// quote, quote:
//
//	Quote("it's $HOME") == `'it'\''s $HOME'`
//
// It is safe for any byte string without NUL: newlines, $(...), backticks
// and invalid UTF-8 included.
//
// Quote panics if s contains NUL: use it for strings known to be NUL-free
// (paths, names, literals) and [QuoteChecked] for anything else.
func Quote(s string) string {
	q, err := QuoteChecked(s)
	if err != nil {
		panic("ssh.Quote: " + err.Error() + "; use QuoteChecked")
	}
	return q
}

// QuoteChecked is [Quote] that returns [ErrNUL] instead of panicking.
func QuoteChecked(s string) (string, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return "", ErrNUL
	}
	if s != "" && strings.IndexFunc(s, needsQuoting) < 0 {
		return s, nil
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'", nil
}

// needsQuoting reports a rune that needs quoting. '=' is left out of the safe set
// so that a quoted first word is never taken for an assignment, and '~'
// so that it is never expanded.
func needsQuoting(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("@%+:,./_-", r)
}

// Command returns a command line that runs name with args, each quoted
// with [Quote]: Command("mkdir", "-p", dir) is safe for any dir. Like
// Quote, it panics if a word contains NUL.
func Command(name string, args ...string) string {
	words := make([]string, 0, 1+len(args))
	words = append(words, Quote(name))
	for _, a := range args {
		words = append(words, Quote(a))
	}
	return strings.Join(words, " ")
}
