package kubernetes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/org/gpuprov/provider"
)

// classify maps an API failure to a *provider.Error. The StatusReason (the
// Kubernetes API's machine-readable cause, documented on the StatusReason
// constants of k8s.io/apimachinery/pkg/apis/meta/v1) decides, and for a 403
// Forbidden the message, because the authorizer and every admission plugin
// answer with the same reason (see forbidden):
//
//	reason / condition                                   kind
//	Unauthorized (401)                                   Credentials
//	Forbidden (403)                                      see forbidden
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
	switch {
	case apierrors.IsUnauthorized(err):
		pe.Kind = provider.Credentials
	case apierrors.IsForbidden(err):
		pe.Kind, pe.Block = forbidden(err, st.Message)
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

// authorizerDenial matches the text the API server's authorization filter
// writes for every authorizer (RBAC, Node, webhook) that denies a request:
// `User "<name>" cannot <verb> resource "<resource>" in API group "<group>"
// in the namespace "<ns>"` (or "at the cluster scope"), and `User "<name>"
// cannot <verb> path "<path>"` for a non-resource URL
// (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go,
// forbiddenMessage).
var authorizerDenial = regexp.MustCompile(`User ".*" cannot \S+ (resource|path) "`)

// forbidden classifies a 403. The authorizer and the admission plugins all
// answer StatusReasonForbidden; admission.NewForbidden (k8s.io/apiserver
// pkg/admission/errors.go) prefixes the plugin's text with `<resource>
// "<name>" is forbidden: `. Only the authorizer's denial is a credentials
// problem; an admission plugin refuses this pod, in this namespace:
//
//	message (plugin)                                              kind, scope
//	User "…" cannot <verb> resource|path … (authorizer)           Credentials, provider
//	exceeded quota: … / insufficient quota to consume: …          Quota, region (the namespace)
//	  (ResourceQuota)
//	status unknown for quota: … (ResourceQuota: the quota         Transient: the quota controller
//	  controller has not counted usage yet)                       fills it in
//	failed quota: …: must specify … (ResourceQuota: a compute     Unavailable, region
//	  quota needs requests/limits the pod does not set)
//	maximum|minimum … usage per Container|Pod is …, … max limit   Unavailable, offer: the offer's
//	  to request ratio per … (LimitRanger)                        shape; a smaller one may pass
//	maximum|minimum storage usage per PersistentVolumeClaim is    Unavailable, region: a volume's
//	  …, but request is … (LimitRanger on a claim, volume.go)     size, the same on every offer
//	unable to … because there was an error enforcing limit        Transient
//	  ranges (LimitRanger's lister failed)
//	unable to create new content in namespace … because it is     Unavailable, region: termination
//	  being terminated (NamespaceLifecycle; cause                 ends with the namespace gone, never
//	  NamespaceTerminating)                                       Active again
//	pod rejected: RuntimeClass "…" not found (RuntimeClass)       Unavailable, region
//	conflict: runtimeClass.scheduling.nodeSelector[…] (RuntimeClass)  Unavailable, offer
//	violates PodSecurity (PodSecurity)                            Unavailable, region
//	admission webhook "…" denied the request (webhook)            Unavailable, region
//	anything else                                                 Failed (teardown, next offer)
func forbidden(err error, message string) (provider.ErrorKind, provider.Scope) {
	msg := strings.ToLower(message)
	has := func(subs ...string) bool {
		return slices.ContainsFunc(subs, func(s string) bool { return strings.Contains(msg, s) })
	}
	switch {
	case authorizerDenial.MatchString(message):
		return provider.Credentials, provider.ScopeDefault
	case has("status unknown for quota", "error enforcing limit ranges"):
		return provider.Transient, provider.ScopeDefault
	case has("exceeded quota", "insufficient quota to consume"):
		return provider.Quota, provider.ScopeDefault
	case has("failed quota"), has("usage per persistentvolumeclaim is"):
		return provider.Unavailable, provider.ScopeRegion
	case has("usage per container is", "usage per pod is", "max limit to request ratio per",
		"conflict: runtimeclass.scheduling.nodeselector"):
		return provider.Unavailable, provider.ScopeOffer
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause), has("because it is being terminated"),
		has("pod rejected: runtimeclass"), has("violates podsecurity"), has("denied the request"):
		return provider.Unavailable, provider.ScopeRegion
	}
	return provider.Failed, provider.ScopeDefault
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
