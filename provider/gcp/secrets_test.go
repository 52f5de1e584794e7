package gcp_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cloud.google.com/go/auth"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp"
)

// staticToken is a token provider that hands out one known access token.
type staticToken string

func (s staticToken) Token(context.Context) (*auth.Token, error) {
	return &auth.Token{Value: string(s), Type: "Bearer"}, nil
}

// A proxy or gateway in front of the API may echo the request's
// Authorization header in its error body. The adapter's access token must
// not reach the error a primitive returns, whatever the status (401 is
// Credentials, 500 Transient), and the kind must still be decided from the
// answer.
func TestErrorsNeverCarryTheAccessToken(t *testing.T) {
	const token = "ya29.a0AfB_byC-test-access-token-0123456789abcdef"
	for _, tc := range []struct {
		status int
		kind   provider.ErrorKind
	}{
		{401, provider.Credentials},
		{500, provider.Transient},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			c, mt := newCloud(t)
			creds := auth.NewCredentials(&auth.CredentialsOptions{TokenProvider: staticToken(token)})
			p := c.provider(t, mt, gcp.Config{}, gcp.WithCredentials(creds))
			spec := newSpec(t, "leak")
			o := offerIn(t, p, l4, "us-central1-a", false)
			c.echoAuth = tc.status
			for name, call := range map[string]func() error{
				"prepare": func() error { _, err := p.Prepare(context.Background(), &o, spec); return err },
				"create": func() error {
					_, err := p.Create(context.Background(), &o, []byte(`{"image":"i","tag":"t","network":"n"}`), spec)
					return err
				},
				"observe": func() error { _, err := p.Observe(context.Background(), o.Location, "leak"); return err },
				"list":    func() error { _, err := p.List(context.Background(), provider.Location{}); return err },
				"delete": func() error {
					return p.Delete(context.Background(), o.Location, "leak", []string{"7000000000000000001"})
				},
				"cleanup": func() error { return p.Cleanup(context.Background(), o.Location, "leak") },
			} {
				err := call()
				kindOf(t, err, tc.kind)
				if strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), "Authorization: Bearer [REDACTED]") {
					t.Errorf("%s: %v", name, err)
				}
			}
			// The mock saw the token: it was sent, and masked on the way back.
			if calls := c.calls("/compute/v1/"); len(calls) == 0 || calls[0].Auth != "Bearer "+token {
				t.Fatalf("requests did not carry the token: %+v", calls)
			}
		})
	}
}

// The private key of a service-account credentials file is masked too,
// in the forms it can be echoed in (as in the file, JSON-escaped, its
// base64 body on one line).
func TestErrorsNeverCarryTheCredentialsFileKey(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	file := filepath.Join(t.TempDir(), "sa.json")
	b, _ := json.Marshal(map[string]string{"type": "service_account", "project_id": project, "private_key_id": "abc123",
		"private_key": pemKey, "client_email": "gpuprov@" + project + ".iam.gserviceaccount.com",
		"token_uri": "https://oauth2.googleapis.com/token"})
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	escaped, _ := json.Marshal(pemKey)
	body := strings.Join(strings.Split(strings.TrimSpace(pemKey), "\n")[1:len(strings.Split(strings.TrimSpace(pemKey), "\n"))-1], "")
	for name, echo := range map[string]string{"pem": pemKey, "json": string(escaped), "body": body} {
		c, mt := newCloud(t)
		c.syncFaults["GET zones/us-central1-a/instances"] = []apiFault{{Status: 403, Reason: "forbidden", Message: "echo: " + echo}}
		p := c.provider(t, mt, gcp.Config{CredentialsFile: file}, gcp.WithCredentials(
			auth.NewCredentials(&auth.CredentialsOptions{TokenProvider: staticToken("ya29.unused-token-for-this-test")})))
		_, err := p.Observe(context.Background(), provider.Location{Region: "us-central1", Zone: "us-central1-a"}, "leak")
		kindOf(t, err, provider.Credentials)
		if strings.Contains(err.Error(), body[:40]) || !strings.Contains(err.Error(), "[REDACTED]") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
