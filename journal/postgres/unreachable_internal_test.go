package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnreachableCodes: the SQLSTATEs of PostgreSQL's manual, appendix A,
// that say the server cannot serve now, and those that refuse the request
// itself. The errors a real server's outage produces are exercised by
// outagetest and TestOpenRefuses.
func TestUnreachableCodes(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "connection refused", IsTemporary: true}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"admin_shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"crash_shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"cannot_connect_now", &pgconn.PgError{Code: "57P03"}, true},
		{"connection_failure", &pgconn.PgError{Code: "08006"}, true},
		{"disk_full", &pgconn.PgError{Code: "53100"}, true},
		{"too_many_connections", &pgconn.PgError{Code: "53300"}, true},
		{"io_error", &pgconn.PgError{Code: "58030"}, true},
		{"invalid_password", &pgconn.PgError{Code: "28P01"}, false},
		{"unique_violation", &pgconn.PgError{Code: "23505"}, false},
		{"serialization_failure", &pgconn.PgError{Code: "40001"}, false},
		{"query_canceled", &pgconn.PgError{Code: "57014"}, false},
		{"dial refused", fmt.Errorf("commit: %w", refused), true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"reset by the network", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"closed mid-reply", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), true},
		{"conn closed", pgconn.ErrConnClosed, true},
		{"canceled", fmt.Errorf("commit: %w", context.Canceled), false},
		{"deadline", fmt.Errorf("commit: %w", context.DeadlineExceeded), false},
		{"nil", nil, false},
		{"anything else", errors.New("lease lost"), false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("%s: unreachable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
