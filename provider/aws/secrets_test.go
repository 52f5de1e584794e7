package aws_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/smithy-go"
	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/internal/redact"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

const (
	echoKeyID  = "AKIAECHOEXAMPLE12345"
	echoSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	echoToken  = "FwoGZXIvYXdzEXAMPLE//session+token=="
)

// echoBody is an answer to r that repeats the request's credentials, as a
// misbehaving proxy or gateway might: the Authorization header (with the
// access key id), the session token header and the secret access key
// itself; as an EC2 error document when code is set, as plain text
// otherwise.
func echoBody(r *http.Request, code string) string {
	text := "Authorization: " + r.Header.Get("Authorization") + "; X-Amz-Security-Token: " + r.Header.Get("X-Amz-Security-Token") +
		"; secret: " + echoSecret
	if code == "" {
		return "<html>proxy error. " + text + "</html>"
	}
	return `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<Response><Errors><Error><Code>` + code + `</Code><Message>` + esc(text) +
		`</Message></Error></Errors><RequestID>req-echo</RequestID></Response>`
}

// echo is an httpmock responder answering status and echoBody.
func echo(status int, code string) httpmock.Responder {
	return func(r *http.Request) (*http.Response, error) {
		return httpmock.NewStringResponse(status, echoBody(r, code)), nil
	}
}

// leaks returns the credentials (in any form redact knows) in text.
func leaks(text string) bool {
	return redact.New(echoKeyID, echoSecret, echoToken).Contains(text) ||
		strings.Contains(text, echoKeyID) || strings.Contains(text, echoSecret) || strings.Contains(text, echoToken)
}

// An answer echoing the request's credentials reaches the core masked, in
// the error and in the adapter's log, still classified by its code and
// status, and with its code still there for the adapter's own branches.
func TestErrorsNeverCarryTheCredentials(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		code   string
		kind   provider.ErrorKind
	}{
		{"401 AuthFailure", 401, "AuthFailure", provider.Credentials},
		{"500 InternalError", 500, "InternalError", provider.Transient},
		{"401 from a proxy", 401, "", provider.Credentials},
		{"500 from a proxy", 500, "", provider.Transient},
		{"500 InsufficientInstanceCapacity", 500, "InsufficientInstanceCapacity", provider.Capacity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := httpmock.NewMockTransport()
			tr.RegisterNoResponder(echo(tc.status, tc.code))
			var logged strings.Builder
			p, err := aws.New(awsConfig(), aws.WithInstallation(installation), aws.WithLogger(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))),
				aws.WithEndpoint(aws.Endpoint{URL: ec2URL, Client: &http.Client{Transport: tr},
					AccessKeyID: echoKeyID, SecretAccessKey: echoSecret, SessionToken: echoToken}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Observe(context.Background(), provider.Location{Region: "us-east-1"}, "vm")
			if err == nil {
				t.Fatal("no error")
			}
			if leaks(err.Error()) || leaks(logged.String()) {
				t.Fatalf("credentials leak:\nerror: %s\nlog: %s", err, logged.String())
			}
			if tc.code != "" && !strings.Contains(err.Error(), redact.Mask) { // the SDK drops a body it cannot parse
				t.Fatalf("the echo was not masked but dropped: %s", err)
			}
			if got := provider.KindOf(err); got != tc.kind {
				t.Fatalf("kind %s, want %s (%v)", got, tc.kind, err)
			}
			if tc.code != "" {
				var ae smithy.APIError
				if !errors.As(err, &ae) || ae.ErrorCode() != tc.code || !aws.IsCode(err, tc.code) || leaks(ae.ErrorMessage()) {
					t.Fatalf("masked error lost its code %s or leaks through it: %v", tc.code, err)
				}
			}
		})
	}
}

// The adapter's own branches on codes still work on masked errors: a
// TerminateInstances of an unknown id answered with an echo is success.
func TestMaskedNotFoundStillMeansGone(t *testing.T) {
	tr := httpmock.NewMockTransport()
	tr.RegisterNoResponder(echo(400, "InvalidInstanceID.NotFound"))
	p, err := aws.New(awsConfig(), aws.WithEndpoint(aws.Endpoint{URL: ec2URL, Client: &http.Client{Transport: tr},
		AccessKeyID: echoKeyID, SecretAccessKey: echoSecret}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), provider.Location{Region: "us-east-1"}, "vm", []string{"i-0fffffffffffffff0"}); err != nil {
		t.Fatalf("delete of an unknown id answered with an echo: %v", err)
	}
}

// Without an Endpoint the credentials come from the SDK's default chain
// (here: the environment, pointed at a local server by AWS_ENDPOINT_URL);
// the ones it hands out are masked too.
func TestChainCredentialsAreMasked(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close") // no idle connection outlives the test
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(echoBody(r, "AuthFailure")))
	}))
	defer srv.Close()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": echoKeyID, "AWS_SECRET_ACCESS_KEY": echoSecret, "AWS_SESSION_TOKEN": echoToken,
		"AWS_ENDPOINT_URL": srv.URL, "AWS_EC2_METADATA_DISABLED": "true", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
	} {
		t.Setenv(k, v)
	}
	p, err := aws.New(awsConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.List(context.Background(), provider.Location{Region: "us-east-1"})
	if provider.KindOf(err) != provider.Credentials || leaks(err.Error()) || !strings.Contains(err.Error(), redact.Mask) {
		t.Fatalf("list through the SDK chain: %v (want Credentials, masked)", err)
	}
}
