package postgres

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// The range of times a unix-nanosecond BIGINT can hold.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// dbTime converts t for storage: NULL (nil) for the zero time, else unix
// nanoseconds. field names t in the error.
func dbTime(field string, t time.Time) (*int64, error) {
	if t.IsZero() {
		return nil, nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return nil, fmt.Errorf("%s %s is outside the storable range (%d to %d)", field, t.Format(time.RFC3339Nano), minTime.Year(), maxTime.Year())
	}
	n := t.UnixNano()
	return &n, nil
}

// cmpTime converts t for comparison with stored times: the zero time is
// before every stored time, and times outside the range are clamped.
func cmpTime(t time.Time) int64 {
	switch {
	case t.IsZero(), t.Before(minTime):
		return math.MinInt64
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// goTime converts a stored time back: NULL is the zero time, anything else
// is in UTC.
func goTime(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}

// dbJSON converts a JSON field for storage: NULL when empty, else its text,
// which must be valid JSON. The column is TEXT, so the bytes come back as
// written (jsonb would reorder keys and drop whitespace).
func dbJSON(field string, raw json.RawMessage) (*string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("%s is not valid JSON", field)
	}
	s := string(raw)
	return &s, nil
}

// goJSON converts a stored JSON field back: NULL is nil.
func goJSON(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	return json.RawMessage(*s)
}

// dbStrings stores a string list as a TEXT[], NULL when empty.
func dbStrings(ss []string) []string {
	if len(ss) == 0 {
		return nil
	}
	return ss
}

// goStrings reads a list stored by dbStrings: empty is nil.
func goStrings(ss []string) []string {
	if len(ss) == 0 {
		return nil
	}
	return ss
}

// conv converts fields for storage and keeps the first error, so a list of
// arguments reads as one expression.
type conv struct{ err error }

func (c *conv) time(field string, t time.Time) *int64 {
	v, err := dbTime(field, t)
	c.keep(err)
	return v
}

func (c *conv) json(field string, raw json.RawMessage) *string {
	v, err := dbJSON(field, raw)
	c.keep(err)
	return v
}

func (c *conv) keep(err error) {
	if c.err == nil {
		c.err = err
	}
}
