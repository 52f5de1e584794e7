package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// The range of times a unix-nanosecond integer can hold.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// dbTime converts t for storage: NULL for the zero time, else unix
// nanoseconds. field names t in the error.
func dbTime(field string, t time.Time) (any, error) {
	if t.IsZero() {
		return nil, nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return nil, fmt.Errorf("%s %s is outside the storable range (%d to %d)", field, t.Format(time.RFC3339Nano), minTime.Year(), maxTime.Year())
	}
	return t.UnixNano(), nil
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
func goTime(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// dbJSON converts a JSON field for storage: NULL when empty, else its text,
// which must be valid JSON.
func dbJSON(field string, raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("%s is not valid JSON", field)
	}
	return string(raw), nil
}

// goJSON converts a stored JSON field back: NULL is nil.
func goJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// dbStrings stores a string list as a JSON array, NULL when empty.
func dbStrings(ss []string) (any, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(ss)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// goStrings reads a list stored by dbStrings.
func goStrings(s sql.NullString) ([]string, error) {
	if !s.Valid {
		return nil, nil
	}
	var ss []string
	if err := json.Unmarshal([]byte(s.String), &ss); err != nil {
		return nil, fmt.Errorf("stored instance ids %q: %w", s.String, err)
	}
	if len(ss) == 0 {
		return nil, nil
	}
	return ss, nil
}

// dbBool stores a bool as 0 or 1.
func dbBool(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// conv converts fields for storage and keeps the first error, so a list of
// arguments reads as one expression.
type conv struct{ err error }

func (c *conv) time(field string, t time.Time) any {
	v, err := dbTime(field, t)
	c.keep(err)
	return v
}

func (c *conv) json(field string, raw json.RawMessage) any {
	v, err := dbJSON(field, raw)
	c.keep(err)
	return v
}

func (c *conv) strings(ss []string) any {
	v, err := dbStrings(ss)
	c.keep(err)
	return v
}

func (c *conv) keep(err error) {
	if c.err == nil {
		c.err = err
	}
}
