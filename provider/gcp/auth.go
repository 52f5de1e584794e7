package gcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/httptransport"
	compute "cloud.google.com/go/compute/apiv1"

	"github.com/org/gpuprov/internal/redact"
	"github.com/org/gpuprov/provider"
)

// WithCredentials authenticates every call with creds instead of looking
// credentials up (CredentialsFile or Application Default Credentials). With
// WithEndpoint, the calls go through the endpoint's client with creds'
// token added.
func WithCredentials(creds *auth.Credentials) Option { return func(p *Provider) { p.creds = creds } }

// credentialsFile is a credentials file as read: its bytes, its type and
// its secret values (private key, client secret, refresh token), which
// error texts are masked of. Its content is never logged.
type credentialsFile struct {
	name    string
	json    []byte
	typ     credentials.CredType
	secrets []string
}

// readCredentialsFile reads file and its type; only the types gpuprov
// loads are accepted (option.WithCredentialsFile, which accepts any type,
// is deprecated for that reason).
func readCredentialsFile(file string) (*credentialsFile, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("credentials_file: %w", err)
	}
	var head struct {
		Type         string `json:"type"`
		PrivateKey   string `json:"private_key"`
		ClientSecret string `json:"client_secret"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("credentials_file %s: not a JSON credentials file", file)
	}
	f := &credentialsFile{name: file, json: b, secrets: secretForms(head.PrivateKey, head.ClientSecret, head.RefreshToken)}
	switch head.Type {
	case "service_account":
		f.typ = credentials.ServiceAccount
	case "authorized_user":
		f.typ = credentials.AuthorizedUser
	case "external_account":
		f.typ = credentials.ExternalAccount
	case "impersonated_service_account":
		f.typ = credentials.ImpersonatedServiceAccount
	default:
		return nil, fmt.Errorf("credentials_file %s: unsupported credentials type %q", file, head.Type)
	}
	return f, nil
}

// loadCredentials loads f as its type only; nil f means Application
// Default Credentials.
func loadCredentials(f *credentialsFile) (*auth.Credentials, error) {
	opts := &credentials.DetectOptions{Scopes: compute.DefaultAuthScopes()}
	if f == nil {
		c, err := credentials.DetectDefault(opts)
		if err != nil {
			return nil, fmt.Errorf("application default credentials: %w", err)
		}
		return c, nil
	}
	c, err := credentials.NewCredentialsFromJSON(f.typ, f.json, opts)
	if err != nil {
		// The library's text names the file's fields, not their values.
		return nil, fmt.Errorf("credentials_file %s: %w", f.name, err)
	}
	return c, nil
}

// secretForms returns each value as it is and as it appears inside a JSON
// string (a PEM key's newlines as \n), plus a PEM key's body on one line
// and line by line, so an echo of the key in any of these forms is masked.
func secretForms(values ...string) []string {
	var out []string
	for _, v := range values {
		if v == "" {
			continue
		}
		out = append(out, v)
		if j, err := json.Marshal(v); err == nil {
			out = append(out, strings.Trim(string(j), `"`))
		}
		if strings.Contains(v, "-----BEGIN") {
			var body []string
			for _, l := range strings.Split(v, "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "-----") {
					body = append(body, l)
				}
			}
			out = append(out, strings.Join(body, ""))
			out = append(out, body...)
		}
	}
	return out
}

// authClient returns an *http.Client that adds creds' token to every
// request and sends it through base (nil: a clone of
// http.DefaultTransport) with the adapter's token recorder in between, so
// the recorder sees the Authorization header exactly as sent.
func (p *Provider) authClient(creds *auth.Credentials, base http.RoundTripper) (*http.Client, error) {
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	p.tokens.base = base
	return httptransport.NewClient(&httptransport.Options{Credentials: creds, BaseRoundTripper: &p.tokens})
}

// tokenRecorder is the bottom transport of the adapter's authenticated
// client: it notes the credential of every Authorization header sent, so
// that an answer echoing one can be masked.
type tokenRecorder struct {
	base http.RoundTripper
	redact.Tokens
}

func (r *tokenRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.Note(req.Header)
	return r.base.RoundTrip(req)
}

// secrets is every credential value this adapter holds or has sent: the
// credentials file's secrets and the access tokens recorded.
func (p *Provider) secrets() *redact.Secrets {
	if p == nil {
		return nil
	}
	return redact.New(append(append([]string(nil), p.fileSecrets...), p.tokens.Values()...)...)
}

// seal is the one place an error leaves the adapter through: every
// *provider.Error a primitive returns is built by classify, classifyOp or
// errorf, which classify first and then hand it here to mask the
// adapter's credentials out of its text. A masked error no longer unwraps
// to the vendor error (see redact.Secrets.Error); its kind, scope and
// Retry-After are already decided.
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
