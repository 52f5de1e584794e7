package azure

import (
	"context"
	"net/http"
	"os"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/org/gpuprov/internal/redact"
	"github.com/org/gpuprov/provider"
)

// WithCredential authenticates every call with cred instead of
// DefaultAzureCredential. With WithEndpoint, the calls go to the endpoint
// with cred's token.
func WithCredential(cred azcore.TokenCredential) Option {
	return func(p *Provider) { p.cred = &credential{cred: cred} }
}

// secretEnv are the environment variables in which DefaultAzureCredential's
// environment credential finds secrets (azidentity's EnvironmentCredential:
// a client secret, a certificate's password, a user's password). Their
// values are masked out of error texts when DefaultAzureCredential is in
// use; gpuprov's config never holds a credential.
var secretEnv = []string{"AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PASSWORD", "AZURE_PASSWORD"}

// credential is the adapter's azcore.TokenCredential: the one given
// (WithCredential) or DefaultAzureCredential, built at the first token
// request so that building the provider reads no environment and no
// credential file. Every token error it returns is a *tokenError, which
// classify maps to Credentials.
type credential struct {
	cred azcore.TokenCredential // nil: DefaultAzureCredential, built lazily
	opts *azidentity.DefaultAzureCredentialOptions

	once    sync.Once
	err     error
	mu      sync.Mutex
	secrets []string // the environment's secret values, read with the credential
}

// secretValues returns the environment secrets read so far.
func (c *credential) secretValues() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.secrets...)
}

func (c *credential) GetToken(ctx context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.once.Do(func() {
		if c.cred != nil {
			return
		}
		c.mu.Lock()
		for _, k := range secretEnv {
			if v := os.Getenv(k); v != "" {
				c.secrets = append(c.secrets, v)
			}
		}
		c.mu.Unlock()
		c.cred, c.err = azidentity.NewDefaultAzureCredential(c.opts)
	})
	if c.err != nil {
		return azcore.AccessToken{}, &tokenError{c.err}
	}
	tok, err := c.cred.GetToken(ctx, o)
	if err != nil {
		return tok, &tokenError{err}
	}
	return tok, nil
}

// tokenError is a failure to get an access token: no credential found,
// a refused client secret, an expired CLI login.
type tokenError struct{ err error }

func (e *tokenError) Error() string { return "getting an access token: " + e.err.Error() }
func (e *tokenError) Unwrap() error { return e.err }

// placeholderToken is the credential of WithEndpoint without
// WithCredential: the ARM pipeline needs one, tests need none, and a
// fixed word proves that no real token was looked up.
type placeholderToken struct{}

func (placeholderToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: "gpuprov-test-no-credential"}, nil
}

// tokenRecorder is the bottom transport of every client: it notes the
// credential of every Authorization header sent (an ARM token lives about
// an hour), so that an answer echoing one can be masked.
type tokenRecorder struct {
	base policy.Transporter
	redact.Tokens
}

func (r *tokenRecorder) Do(req *http.Request) (*http.Response, error) {
	r.Note(req.Header)
	return r.base.Do(req)
}

// secrets is every credential value this adapter holds or has sent: the
// access tokens recorded and, with DefaultAzureCredential, the
// environment's secrets.
func (p *Provider) secrets() *redact.Secrets {
	if p == nil {
		return nil
	}
	var vals []string
	if p.recorder != nil {
		vals = p.recorder.Values()
	}
	if p.cred != nil {
		vals = append(vals, p.cred.secretValues()...)
	}
	return redact.New(vals...)
}

// seal is the one place an error leaves the adapter through: every
// *provider.Error a primitive returns is built by classify or errorf,
// which decide the kind first and then hand it here to mask the adapter's
// credentials out of its text (an ARM error's text carries the whole
// response body, which a proxy may have filled with the request's
// Authorization header). A masked error no longer unwraps to the vendor
// error (see redact.Secrets.Error); its kind, scope and Retry-After are
// already decided.
func (p *Provider) seal(pe *provider.Error) *provider.Error {
	pe.Err = p.secrets().Error(pe.Err)
	return pe
}

// errorf is provider.Errorf for this adapter, sealed.
func (p *Provider) errorf(kind provider.ErrorKind, op, format string, args ...any) *provider.Error {
	return p.seal(provider.Errorf(kind, p.name, op, format, args...))
}

// maskErr is an error's text for a log line, masked of the credentials.
func (p *Provider) maskErr(err error) string {
	if err == nil {
		return ""
	}
	return p.secrets().String(err.Error())
}
