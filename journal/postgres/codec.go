package postgres

import "github.com/org/gpuprov/journal/internal/rowcodec"

// codec converts records to rows and back (see package rowcodec);
// PostgreSQL stores a string list as a TEXT[], which pgx maps to []string.
var codec = rowcodec.Codec{Lists: arrayLists{}}

// arrayLists stores a string list as a TEXT[].
type arrayLists struct{}

func (arrayLists) Value(ss []string) (any, error) { return ss, nil }

func (arrayLists) Dest() (any, func() ([]string, error)) {
	var ss []string
	return &ss, func() ([]string, error) {
		if len(ss) == 0 {
			return nil, nil
		}
		return ss, nil
	}
}
