package kubernetes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/org/gpuprov/provider"
)

// classify maps an API failure to a *provider.Error. The StatusReason (the
// Kubernetes API's machine-readable cause, documented on the StatusReason
// constants of k8s.io/apimachinery/pkg/apis/meta/v1) decides:
//
//	reason / condition                                   kind
//	Unauthorized (401)                                   Credentials
//	Forbidden (403), "exceeded quota" / "failed quota"   Quota: the namespace's ResourceQuota refused it
//	Forbidden, "violates PodSecurity"                    Unavailable for the region: the namespace's
//	                                                     Pod Security level refuses a root sshd pod
//	Forbidden, anything else (RBAC)                      Credentials
//	TooManyRequests (429), ServerTimeout, Timeout (504), Transient, RetryAfter from
//	ServiceUnavailable (503), InternalError (500),       details.retryAfterSeconds
//	another 5xx, Conflict (409), Expired/Gone (410)
//	Invalid (422), BadRequest (400),                     InvalidRequest
//	RequestEntityTooLarge (413)
//	NotFound of the namespace                            InvalidRequest: the configured namespace is missing
//	NotFound, AlreadyExists, anything else               Failed (callers decide NotFound and
//	                                                     AlreadyExists where they mean success or adopt)
//
// Without an API answer: a TLS verification failure or a kubeconfig
// credential plugin that fails ("getting credentials") is Credentials; a
// timeout, a reset or refused connection, an EOF, or the call's own deadline
// is Transient (the request may have landed; the core observes before it
// resends); anything else is Failed.
func (p *Provider) classify(op string, err error) *provider.Error {
	return classifyError(p.name, op, err)
}

func classifyError(name, op string, err error) *provider.Error {
	pe := &provider.Error{Kind: provider.Failed, Op: op, Provider: name, Err: err}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		pe.Kind = transportKind(err)
		return pe
	}
	if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
		pe.RetryAfter = time.Duration(s) * time.Second
	}
	st := status.Status()
	msg := strings.ToLower(st.Message)
	switch {
	case apierrors.IsUnauthorized(err):
		pe.Kind = provider.Credentials
	case apierrors.IsForbidden(err):
		switch {
		case strings.Contains(msg, "exceeded quota") || strings.Contains(msg, "failed quota"):
			pe.Kind = provider.Quota
		case strings.Contains(msg, "violates podsecurity"):
			pe.Kind, pe.Block = provider.Unavailable, provider.ScopeRegion
		default:
			pe.Kind = provider.Credentials
		}
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsConflict(err),
		apierrors.IsResourceExpired(err), apierrors.IsGone(err), st.Code >= 500:
		pe.Kind = provider.Transient
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
		pe.Kind = provider.InvalidRequest
	case apierrors.IsNotFound(err) && st.Details != nil && st.Details.Kind == "namespaces":
		pe.Kind = provider.InvalidRequest
	}
	return pe
}

// transportKind classifies a call that got no API answer.
func transportKind(err error) provider.ErrorKind {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		netErr    net.Error
	)
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify),
		strings.Contains(err.Error(), "getting credentials"): // client-go's exec credential plugin
		return provider.Credentials
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, http.ErrHandlerTimeout),
		errors.As(err, &netErr) && netErr.Timeout():
		return provider.Transient
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return provider.Transient // dial, read or write on the wire: no answer
	}
	return provider.Failed
}
