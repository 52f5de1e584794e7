// Package member holds what both SQL backends do alike for journal.Members:
// the check of a Beat's arguments, the form its accounts are stored in, and
// the shape of its answer. Each backend keeps the SQL that counts the live
// members (SQLite reads a JSON list, PostgreSQL an array).
//
//	accounts, err := member.Check(name, accounts, expiry)
//	...                 // upsert the row, count the live members per account
//	return member.Live(accounts, counts), nil
package member

import (
	"errors"
	"slices"
	"time"
)

// Check checks a Beat's arguments and returns its accounts as stored:
// sorted, each once, never nil.
func Check(member string, accounts []string, expiry time.Time) ([]string, error) {
	if member == "" {
		return nil, errors.New("beat: empty member")
	}
	if expiry.IsZero() {
		return nil, errors.New("beat: zero expiry")
	}
	out := append([]string{}, accounts...)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Live returns a Beat's answer: an entry for every one of accounts, its
// count in counts (0 when it has none).
func Live(accounts []string, counts map[string]int) map[string]int {
	live := make(map[string]int, len(accounts))
	for _, a := range accounts {
		live[a] = counts[a]
	}
	return live
}
