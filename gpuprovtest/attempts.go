package gpuprovtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/journal"
)

// Attempt is one attempt a failover test expects of a VM, as the journal
// holds it. Empty Provider, Region and Zone are not checked. An attempt
// that failed (Kind set) must be torn down and cleaned up; one with no
// Kind must have succeeded.
type Attempt struct {
	Provider, Region, Zone string
	Kind                   string // the error kind it failed with; empty: it succeeded
}

// CheckAttempts fails t unless the journal j holds exactly want as vm's
// attempts, in order, and returns them for the checks that are the test's
// own (error texts, tokens).
func CheckAttempts(t testing.TB, j journal.Journal, vm string, want ...Attempt) []journal.Attempt {
	t.Helper()
	as, err := j.Attempts(context.Background(), vm)
	if err != nil {
		t.Fatalf("attempts of %s: %v", vm, err)
	}
	var got, exp []string
	for _, a := range as {
		got = append(got, describe(a.Provider, a.Region, a.Zone, a.ErrorKind, string(a.State), a.CleanedUp))
	}
	for i, w := range want {
		a := journal.Attempt{}
		if i < len(as) {
			a = as[i]
		}
		state, cleaned := journal.AttemptSucceeded, false
		if w.Kind != "" {
			state, cleaned = journal.AttemptTornDown, true
		}
		exp = append(exp, describe(or(w.Provider, a.Provider), or(w.Region, a.Region), or(w.Zone, a.Zone), w.Kind, string(state), cleaned))
	}
	if strings.Join(got, "\n") != strings.Join(exp, "\n") {
		t.Fatalf("attempts of %s:\n%s\nwant:\n%s", vm, strings.Join(got, "\n"), strings.Join(exp, "\n"))
	}
	return as
}

func describe(provider, region, zone, kind, state string, cleaned bool) string {
	return fmt.Sprintf("  %s %s/%s kind %q %s cleaned-up=%v", provider, region, zone, kind, state, cleaned && kind != "")
}

func or(want, got string) string {
	if want == "" {
		return got
	}
	return want
}

// OfferAttempts returns vm's attempts as "<offer key> <error kind>" (the
// kind empty for one that did not fail), in order: what a test of block
// scopes compares, where CheckAttempts' locations do not say which
// instance type was tried.
func OfferAttempts(t testing.TB, j journal.Journal, vm string) []string {
	t.Helper()
	as, err := j.Attempts(context.Background(), vm)
	if err != nil {
		t.Fatalf("attempts of %s: %v", vm, err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.OfferKey+" "+a.ErrorKind)
	}
	return out
}

// BlockKeys returns the keys of the blocks j holds in force at now, sorted
// ("offer:<offer key>", "zone:…", "spot:…", "family:…", "region:…",
// "provider:…").
func BlockKeys(t testing.TB, j journal.Journal, now time.Time) []string {
	t.Helper()
	bs, err := j.Blocks(context.Background(), now)
	if err != nil {
		t.Fatalf("blocks: %v", err)
	}
	var keys []string
	for _, b := range bs {
		keys = append(keys, b.Key)
	}
	slices.Sort(keys)
	return keys
}
