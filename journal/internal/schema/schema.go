// Package schema holds what the two SQL backends do alike to version their
// schemas: a list of migrations whose length is the schema version, the
// refusal of a journal newer than the code, the loop that applies the
// missing migrations in order, and the installation id made with a new
// journal. Each backend keeps its DDL, where it records the version, and
// the transaction and lock its migrations run under.
//
//	var migrations = schema.Migrations{ddl1, ddl2}
//
//	if err := migrations.Check(v, ErrNewerSchema); err != nil { ... }
//	err := migrations.Run(v, func(ddl string) error { ... }, func(v int) error { ... })
package schema

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Migrations bring a schema from version i to i+1; the schema version of a
// journal is the number of migrations applied. Append only: a released
// migration never changes.
type Migrations []string

// Version is the schema version the migrations lead to: the one a backend
// writes and the newest it can open.
func (m Migrations) Version() int { return len(m) }

// Check refuses a journal at schema version v that is newer than m, with an
// error wrapping newer: it is never downgraded.
func (m Migrations) Check(v int, newer error) error {
	if v > m.Version() {
		return fmt.Errorf("%w: schema version %d, this gpuprov knows up to %d; upgrade gpuprov", newer, v, m.Version())
	}
	return nil
}

// Run brings a schema at version from up to m.Version(): for each missing
// migration in order, exec runs its DDL and then record stores the version
// it reached. Both run inside the backend's migrating transaction; Run
// stops at the first error.
func (m Migrations) Run(from int, exec func(ddl string) error, record func(version int) error) error {
	for v := from; v < m.Version(); v++ {
		if err := exec(m[v]); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v+1, err)
		}
		if err := record(v + 1); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v+1, err)
		}
	}
	return nil
}

// NewInstallation returns a random installation id: 16 hex digits.
func NewInstallation() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("installation id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
