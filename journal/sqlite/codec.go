package sqlite

import (
	"encoding/json"
	"fmt"

	"github.com/org/gpuprov/journal/internal/rowcodec"
)

// codec converts records to rows and back (see package rowcodec); SQLite
// stores a string list as a JSON array in a TEXT column.
var codec = rowcodec.Codec{Lists: jsonLists{}}

// jsonLists stores a string list as JSON text.
type jsonLists struct{}

func (jsonLists) Value(ss []string) (any, error) {
	b, err := json.Marshal(ss)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func (jsonLists) Dest() (any, func() ([]string, error)) {
	var s *string
	return &s, func() ([]string, error) {
		if s == nil {
			return nil, nil
		}
		var ss []string
		if err := json.Unmarshal([]byte(*s), &ss); err != nil {
			return nil, fmt.Errorf("stored instance ids %q: %w", *s, err)
		}
		if len(ss) == 0 {
			return nil, nil
		}
		return ss, nil
	}
}
