package postgres

import (
	"strconv"
	"strings"
)

// Table names. Every table carries the gpuprov_ prefix, so a journal can
// share a database (or a schema) with other programs' tables without a
// clash; Open still refuses a schema that holds tables but no journal.
const (
	metaTable     = "gpuprov_meta"
	versionTable  = "gpuprov_schema_version"
	vmsTable      = "gpuprov_vms"
	attemptsTable = "gpuprov_attempts"
	eventsTable   = "gpuprov_events"
	seqTable      = "gpuprov_event_seq"
	blocksTable   = "gpuprov_blocks"
)

// params returns "$from, $from+1, ..." for n parameters.
func params(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$")
		b.WriteString(strconv.Itoa(from + i))
	}
	return b.String()
}

// assignments returns "col = $from, ..." for cols.
func assignments(cols []string, from int) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + " = $" + strconv.Itoa(from+i)
	}
	return strings.Join(parts, ", ")
}
