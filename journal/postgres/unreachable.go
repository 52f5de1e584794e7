package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// unreachable reports whether err says the server cannot be reached or
// cannot serve now, as opposed to refusing what was asked: a dial that
// failed or timed out, a connection the server closed or reset, a server
// shutting down or starting up, one out of connections or of disk. Errors
// the server returns for the request itself (a constraint, a lost lease,
// wrong credentials) and the caller's own cancellation are not.
//
// SQLSTATE classes and codes from the PostgreSQL manual, appendix A
// "PostgreSQL Error Codes": class 08 connection exception, class 53
// insufficient resources (53100 disk_full, 53300 too_many_connections),
// 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
// 58030 io_error.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P01", "57P02", "57P03", "58030":
			return true
		}
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53")
	}
	// A certificate the client refuses is a configuration problem,
	// whatever the connection it came on.
	var cve *tls.CertificateVerificationError
	var he x509.HostnameError
	var ua x509.UnknownAuthorityError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cve) || errors.As(err, &he) || errors.As(err, &ua) || errors.As(err, &ci) {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// No answer from the server at all: refused, reset, timed out
		// (connect_timeout) or closed during the start-up exchange.
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The caller's deadline, not the server's silence.
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.Timeout(err)
}
