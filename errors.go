package gpuprov

import (
	"errors"
	"fmt"
	"strings"

	"github.com/org/gpuprov/journal"
)

// prefix starts every error text of the package, once.
const prefix = "gpuprov: "

// errorf is fmt.Errorf for the package's errors: the text starts with
// "gpuprov: " once, however many of the errors it wraps (the package's own
// sentinels, a nested errorf) start with it too. Wrapping is kept:
// errors.Is and errors.As see every %w operand.
func errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	text := strings.ReplaceAll(err.Error(), ": "+prefix, ": ")
	return &pkgError{text: prefix + strings.TrimPrefix(text, prefix), err: err}
}

type pkgError struct {
	text string
	err  error
}

func (e *pkgError) Error() string { return e.text }
func (e *pkgError) Unwrap() error { return e.err }

// vmError says what went wrong reading or leasing VM name. An unknown VM is
// one plain sentence (the journal's own wording and file path add nothing)
// that still matches ErrNotFound.
func vmError(name string, err error) error {
	if errors.Is(err, journal.ErrNotFound) {
		return errorf("no VM named %s in the journal: %w", name, ErrNotFound)
	}
	return errorf("VM %s: %w", name, err)
}
