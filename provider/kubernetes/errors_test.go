package kubernetes

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/org/gpuprov/provider"
)

var podsResource = schema.GroupResource{Resource: "pods"}

// TestClassify is the error table. Each row is an answer of the API server
// as apimachinery's constructors build it, and the reference for it: the
// StatusReason constants of k8s.io/apimachinery/pkg/apis/meta/v1 (types.go,
// "StatusReason is an enumeration of possible failure causes"), and for the
// Forbidden variants the admission plugin or authorizer that answers so.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		kind  provider.ErrorKind
		scope provider.Scope
		after time.Duration
		ref   string // where the answer is documented
	}{
		{"unauthorized", apierrors.NewUnauthorized("Unauthorized"), provider.Credentials, provider.ScopeProvider, 0,
			"StatusReasonUnauthorized (401): requires the user to present appropriate authorization credentials"},
		{"rbac forbidden", apierrors.NewForbidden(podsResource, "", errors.New(`User "system:serviceaccount:gpuprov:gpuprov" cannot create resource "pods" in API group "" in the namespace "gpuprov"`)),
			provider.Credentials, provider.ScopeProvider, 0,
			"StatusReasonForbidden (403): the server being configured to deny access; the RBAC authorizer's text (Using RBAC Authorization)"},
		{"quota exceeded", apierrors.NewForbidden(podsResource, "gpuprov-a-1", errors.New("exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8")),
			provider.Quota, provider.ScopeRegion, 0,
			"StatusReasonForbidden (403) from the ResourceQuota admission plugin: \"exceeded quota: %s, requested: %s, used: %s, limited: %s\" (Resource Quotas: rejects with 403 Forbidden)"},
		{"quota exceeded, older capitalisation", apierrors.NewForbidden(podsResource, "gpuprov-a-1", errors.New("Exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8")),
			provider.Quota, provider.ScopeRegion, 0, "the same plugin before Kubernetes 1.9 wrote \"Exceeded quota\""},
		{"quota needs a request", apierrors.NewForbidden(podsResource, "gpuprov-a-1", errors.New("failed quota: compute: must specify limits.cpu for: vm; limits.memory for: vm")),
			provider.Unavailable, provider.ScopeRegion, 0, "StatusReasonForbidden from the ResourceQuota admission plugin's pod evaluator (pkg/quota/v1/evaluator/core/pods.go Constraints): \"failed quota: %s: must specify %s\"; the pod sets cpu and memory, so this names a requirement of the namespace the adapter does not meet, not a used-up quota"},
		{"pod security", apierrors.NewForbidden(podsResource, "gpuprov-a-1", errors.New(`violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "vm" must set securityContext.runAsNonRoot=true)`)),
			provider.Unavailable, provider.ScopeRegion, 0, "StatusReasonForbidden from the PodSecurity admission plugin (Pod Security Admission)"},
		{"too many requests", apierrors.NewTooManyRequests("the server has received too many requests and has asked us to try again later", 7),
			provider.Transient, provider.ScopeOffer, 7 * time.Second, "StatusReasonTooManyRequests (429): the client should wait at least retryAfterSeconds"},
		{"server timeout", apierrors.NewServerTimeout(podsResource, "create", 3), provider.Transient, provider.ScopeOffer, 3 * time.Second,
			"StatusReasonServerTimeout (500): the client should retry the request; retryAfterSeconds"},
		{"timeout", apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0), provider.Transient, provider.ScopeOffer, 0,
			"StatusReasonTimeout (504): the request might succeed with an increased value of timeout"},
		{"service unavailable", apierrors.NewServiceUnavailable("etcdserver: leader changed"), provider.Transient, provider.ScopeOffer, 0,
			"StatusReasonServiceUnavailable (503): retrying the request after some time might succeed"},
		{"internal error", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), provider.Transient, provider.ScopeOffer, 0,
			"StatusReasonInternalError (500): the outcome of the call is unknown"},
		{"bad gateway", apierrors.NewGenericServerResponse(http.StatusBadGateway, "POST", podsResource, "", "", 0, true), provider.Transient, provider.ScopeOffer, 0,
			"a proxy's 5xx: StatusReasonUnknown with the HTTP code (apierrors.NewGenericServerResponse)"},
		{"conflict", apierrors.NewConflict(podsResource, "gpuprov-a-1", errors.New("the object has been modified")), provider.Transient, provider.ScopeOffer, 0,
			"StatusReasonConflict (409): the operation cannot be completed due to a conflict; read again and retry"},
		{"expired", apierrors.NewResourceExpired("too old resource version"), provider.Transient, provider.ScopeOffer, 0,
			"StatusReasonExpired (410): the content requested has expired"},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "gpuprov-a-1", field.ErrorList{field.Invalid(field.NewPath("spec", "containers").Index(0).Child("image"), "", "must not be empty")}),
			provider.InvalidRequest, provider.ScopeOffer, 0, "StatusReasonInvalid (422): invalid data provided as part of the request"},
		{"bad request", apierrors.NewBadRequest("the server rejected our request for an unknown reason"), provider.InvalidRequest, provider.ScopeOffer, 0,
			"StatusReasonBadRequest (400): API calls that return BadRequest can never succeed"},
		{"entity too large", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), provider.InvalidRequest, provider.ScopeOffer, 0,
			"StatusReasonRequestEntityTooLarge (413)"},
		{"namespace missing", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "gpuprov"), provider.InvalidRequest, provider.ScopeOffer, 0,
			"StatusReasonNotFound (404) with details.kind namespaces: a create in a namespace that does not exist"},
		{"not found", apierrors.NewNotFound(podsResource, "gpuprov-a-1"), provider.Failed, provider.ScopeOffer, 0,
			"StatusReasonNotFound (404); Delete and Cleanup take it as success before classifying"},
		{"already exists", apierrors.NewAlreadyExists(podsResource, "gpuprov-a-1"), provider.Failed, provider.ScopeOffer, 0,
			"StatusReasonAlreadyExists (409); Create adopts before classifying"},
		{"method not allowed", apierrors.NewMethodNotSupported(podsResource, "patch"), provider.Failed, provider.ScopeOffer, 0,
			"StatusReasonMethodNotAllowed (405): can never succeed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pe := classifyError("kubernetes", "create", fmt.Errorf("wrapped: %w", tc.err))
			if pe.Kind != tc.kind || pe.Scope() != tc.scope || pe.RetryAfter != tc.after {
				t.Fatalf("got %s/%s/%v, want %s/%s/%v (%s)", pe.Kind, pe.Scope(), pe.RetryAfter, tc.kind, tc.scope, tc.after, tc.ref)
			}
			var se *apierrors.StatusError
			if !errors.As(pe, &se) || !errors.Is(pe, tc.kind) {
				t.Fatalf("%v does not wrap the API error", pe)
			}
		})
	}
}

// Calls that got no API answer.
func TestClassifyTransport(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind provider.ErrorKind
	}{
		{context.DeadlineExceeded, provider.Transient},
		{&url.Error{Op: "Post", URL: "https://k8s:6443/api/v1/namespaces/gpuprov/pods", Err: io.EOF}, provider.Transient},
		{&url.Error{Op: "Get", URL: "https://k8s:6443/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, provider.Transient},
		{&url.Error{Op: "Get", URL: "https://k8s:6443/api", Err: syscall.ECONNRESET}, provider.Transient},
		{&url.Error{Op: "Get", URL: "https://k8s:6443/api", Err: x509.UnknownAuthorityError{}}, provider.Credentials},
		{&url.Error{Op: "Get", URL: "https://k8s:6443/api", Err: errors.New("getting credentials: exec: executable gke-gcloud-auth-plugin not found")}, provider.Credentials},
		{errors.New("json: cannot unmarshal"), provider.Failed},
	} {
		if pe := classifyError("kubernetes", "observe", tc.err); pe.Kind != tc.kind {
			t.Errorf("%v: %s, want %s", tc.err, pe.Kind, tc.kind)
		}
	}
}

// client-go resends a request that a 429 or 5xx with Retry-After answered,
// up to ten times; tune turns that off: one request reaches the server, and
// the error carries the wait, whether the body was plain text (the API
// server's priority-and-fairness 429) or a Status.
func TestRetryAfterIsTheCoresToHonour(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body string
		code                    int
		kind                    provider.ErrorKind
	}{
		{"plain 429", "text/plain", "Too many requests, please try again later.\n", 429, provider.Transient},
		{"status 503", "application/json", `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcd leader changed","reason":"ServiceUnavailable","code":503}`, 503, provider.Transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", tc.contentType)
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(tc.code)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			rc := &rest.Config{Host: srv.URL}
			tune(rc)
			cs, err := k8s.NewForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			pe := classifyError("kubernetes", "plan", err)
			if n := calls.Load(); n != 1 {
				t.Fatalf("the server saw %d requests, want 1", n)
			}
			if pe.Kind != tc.kind || pe.RetryAfter != 7*time.Second {
				t.Fatalf("%v: %s after %v, want %s after 7s", err, pe.Kind, pe.RetryAfter, tc.kind)
			}
		})
	}
}
