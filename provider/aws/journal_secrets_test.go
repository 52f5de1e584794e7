package aws_test

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpuprovtest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

// roundTrip is an http.RoundTripper made of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestJournalNeverHoldsTheCredentials launches through the Provisioner,
// with the SQLite journal, on the fake EC2, whose RunInstances goes through
// a gateway that echoes the request's credentials in an EC2 error document
// (the Authorization header, the session token header and the secret
// access key): first a 500 InternalError (retried), then a 401 AuthFailure
// (the launch aborts). The launch's error, every event the sink saw, and
// the journal file's bytes (and its -wal) hold neither the secret access
// key nor the session token in any form, while the masked echo is there to
// be read.
func TestJournalNeverHoldsTheCredentials(t *testing.T) {
	clk := clock.NewFake(t0)
	t.Cleanup(clk.AutoAdvance())
	f := newFakeEC2(t, clk)
	var runs atomic.Int32
	e := f.endpoint() // the fake checks the key id; the secret and token are the echoed ones
	e.SecretAccessKey, e.SessionToken = echoSecret, echoToken
	e.Client = &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		if form, _ := url.ParseQuery(string(b)); form.Get("Action") != "RunInstances" {
			return f.tr.RoundTrip(r)
		}
		if runs.Add(1) == 1 {
			return echo(http.StatusInternalServerError, "InternalError")(r)
		}
		return echo(http.StatusUnauthorized, "AuthFailure")(r)
	})}
	l := gpuprovtest.LaunchEchoed(t, clk, func(inst string) provider.CloudProvider {
		p, err := aws.New(aws.Config{Regions: []string{"us-east-1"}, RequestsPerSecond: 1000},
			aws.WithInstallation(inst), aws.WithEndpoint(e), aws.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, gpuprov.Request{Name: "train", GPU: "L4", Timeout: time.Hour},
		gpuprov.WithSSH("ubuntu", []string{newSpec(t, "k").AuthorizedKeys[0]}, true))
	if runs.Load() < 2 {
		t.Fatalf("%d RunInstances reached the echo, want the 500 and the 401", runs.Load())
	}
	gpuprovtest.LaunchLeaks(t, map[string]string{"secret access key": echoSecret, "session token": echoToken}, l)
}
