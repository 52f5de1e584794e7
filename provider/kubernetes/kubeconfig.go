package kubernetes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// loaded is what a kubeconfig (or the in-cluster config) gives.
type loaded struct {
	clientset   k8s.Interface
	namespace   string
	contextName string
}

// loadClient builds the clientset of cfg: the kubeconfig file cfg.Kubeconfig,
// else $KUBECONFIG or ~/.kube/config (clientcmd's default loading rules),
// else, in a pod, the service account's in-cluster config. cfg.Context
// picks the context. The namespace is the context's (in a pod: the pod's).
func loadClient(cfg Config) (*loaded, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if cfg.Kubeconfig != "" {
		rules.ExplicitPath = expandHome(cfg.Kubeconfig)
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Context})
	rc, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errors.New("no kubeconfig (set kubeconfig, $KUBECONFIG or ~/.kube/config) and not running in a pod")
		}
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig namespace: %w", err)
	}
	name := cfg.Context
	if raw, err := cc.RawConfig(); err == nil && name == "" {
		name = raw.CurrentContext
	}
	if name == "" {
		name = "in-cluster"
	}
	tune(rc)
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	return &loaded{clientset: cs, namespace: ns, contextName: name}, nil
}

// tune makes client-go a single-attempt client, so that the core's backoff is
// the only retry layer: JSON on the wire (so that noRetryAfter can read error
// bodies), no client-side rate limiter (the core's token bucket paces calls),
// and every response passed through noRetryAfter.
func tune(rc *rest.Config) {
	rc.ContentType = "application/json"
	rc.AcceptContentTypes = "application/json"
	rc.QPS, rc.Burst = -1, 0
	if rc.UserAgent == "" {
		rc.UserAgent = "gpuprov"
	}
	prev := rc.WrapTransport
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return noRetryAfter{rt}
	}
}

// noRetryAfter keeps client-go from retrying on its own. client-go's REST
// client resends a request up to ten times, sleeping in between, when a 429
// or 5xx answer carries a Retry-After header (rest/with_retry.go, checkWait);
// the typed clientset offers no way to turn that off. noRetryAfter removes
// the header and puts its wait into the answer's Status instead
// (details.retryAfterSeconds, where the API server itself puts it and where
// apierrors.SuggestsClientDelay reads it), so the error reaches the adapter
// at once and still carries the wait for the core's backoff. A body that is
// not a Status (the API server's own max-in-flight and priority-and-fairness
// 429s are plain text) becomes one with the status code's reason and the
// body as message.
type noRetryAfter struct{ next http.RoundTripper }

func (t noRetryAfter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil || resp == nil {
		return resp, err
	}
	ra := resp.Header.Get("Retry-After")
	if ra == "" || (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500) {
		return resp, nil
	}
	resp.Header.Del("Retry-After")
	secs := retryAfterSeconds(ra, time.Now())
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if rerr != nil {
		// The answer was cut off: let client-go see a transport error.
		return nil, fmt.Errorf("reading a %d answer: %w", resp.StatusCode, rerr)
	}
	var st metav1.Status
	if json.Unmarshal(body, &st) != nil || st.Kind != "Status" {
		msg := strings.TrimSpace(string(body))
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		st = metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: int32(resp.StatusCode), Reason: reasonOfCode(resp.StatusCode), Message: msg}
	}
	if st.Details == nil {
		st.Details = &metav1.StatusDetails{}
	}
	if st.Details.RetryAfterSeconds == 0 {
		st.Details.RetryAfterSeconds = int32(secs)
	}
	out, _ := json.Marshal(st) // a Status always marshals
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Del("Content-Encoding")
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return resp, nil
}

// retryAfterSeconds parses a Retry-After value: seconds, or an HTTP date.
func retryAfterSeconds(v string, now time.Time) int {
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return s
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return int(t.Sub(now).Round(time.Second) / time.Second)
	}
	return 0
}

// reasonOfCode is the StatusReason the API server uses for a status code
// (the same table as apierrors.NewGenericServerResponse).
func reasonOfCode(code int) metav1.StatusReason {
	switch code {
	case http.StatusTooManyRequests:
		return metav1.StatusReasonTooManyRequests
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	case http.StatusGatewayTimeout:
		return metav1.StatusReasonTimeout
	case http.StatusInternalServerError:
		return metav1.StatusReasonInternalError
	}
	return metav1.StatusReasonUnknown
}

func expandHome(path string) string {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return path
}
