package lambda_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
)

// These tests follow the Lambda Cloud API's OpenAPI document, version 1.8.3
// (alexandervaneck/lambda-ai-cloud-api-client, openapi-1.8.3.json).

// TestDiagnoseReadsTheAuditLogPages: getAuditEvents answers
// {"data":{"events":[…],"page_token":…}} (AuditEventsPage). An instance the
// API no longer knows is attributed from its last event, found on the third
// page; the adapter read "data" as a list and failed every such diagnosis.
func TestDiagnoseReadsTheAuditLogPages(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	e.api.AuditPageSize = 2
	event := func(id, action, at string) map[string]any {
		return map[string]any{"service_name": "cloud", "resource_name": "instance", "action": action,
			"catalog_version": "2025-09-06", "event_id": id + action, "event_time": at, "actor_lrn": nil,
			"resource_lrns": []string{"lrn:cloud:instance:" + id}, "resource_owner_lrn": nil, "request_api_key_lrn": nil,
			"additional_details": map[string]any{"instance_lrn": "lrn:cloud:instance:" + id}}
	}
	e.api.Audit = []map[string]any{
		event("gone1", "launched", "2026-01-01T00:00:00Z"), event("other", "launched", "2026-01-01T00:01:00Z"),
		event("other", "terminated", "2026-01-01T00:02:00Z"), event("x", "launched", "2026-01-01T00:03:00Z"),
		event("gone1", "terminated", "2026-01-01T00:05:00Z"),
	}
	d, err := e.p.Diagnose(context.Background(), provider.Location{Region: "us-east-1"}, "train", "gone1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Exists || len(d.Findings) != 1 || d.Findings[0].Code != "terminated" || d.Findings[0].At.Format("15:04") != "00:05" {
		t.Fatalf("diagnosis %+v, want the termination at 00:05", d)
	}
	if calls := e.api.Calls(http.MethodGet, "/audit-events"); len(calls) != 3 || calls[2].Query != "page_token=4&resource_type=cloud.instance" {
		t.Fatalf("audit calls %+v, want three pages", calls)
	}
}

// TestCleanupOfAKeyAlreadyGone: deleteSSHKey of an id the account does not
// have answers 400 global/invalid-parameters (it documents no 404). A key
// that another process deleted between Cleanup's listing and its DELETE is
// gone: Cleanup succeeds.
func TestCleanupOfAKeyAlreadyGone(t *testing.T) {
	e := newEnv(t, lambda.Config{NoFirewall: true})
	o := e.offer(t)
	if _, err := e.p.Prepare(context.Background(), &o, spec("train")); err != nil {
		t.Fatal(err)
	}
	racer := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodDelete {
			// The other process's DELETE lands first.
			first, err := http.NewRequest(http.MethodDelete, r.URL.String(), nil)
			if err != nil {
				return nil, err
			}
			first.Header = r.Header.Clone()
			if _, err := e.RT.RoundTrip(first); err != nil {
				return nil, err
			}
		}
		return e.RT.RoundTrip(r)
	})}
	p, err := lambda.New(lambda.Config{APIKey: apiKey, NoFirewall: true}, lambda.WithInstallation(installation), lambda.WithHTTP(base, racer))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cleanup(context.Background(), o.Location, "train"); err != nil {
		t.Fatalf("cleanup of a key already gone: %v", err)
	}
	dels := e.api.Calls(http.MethodDelete, "/ssh-keys/")
	if len(dels) != 2 || len(e.api.SSHKeys()) != 0 {
		t.Fatalf("deletes %+v, keys %v", dels, e.api.SSHKeys())
	}
	// The mock answers the second DELETE as Lambda documents.
	resp, err := e.RT.RoundTrip(e.Request(t, http.MethodDelete, base+"/ssh-keys/"+"nope", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Error struct{ Code string } }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 400 || body.Error.Code != lambda.CodeInvalidParameters {
		t.Fatalf("mock answered %d %+v %v", resp.StatusCode, body, err)
	}
}

// TestFirewallProtocolIsSentLowerCase: NetworkProtocol is the enum tcp,
// udp, icmp, all. A port given as "TCP" or "UDP" is sent lower case (the
// mock refuses anything else, as Lambda does); a protocol no port range can
// go with is refused before any request.
func TestFirewallProtocolIsSentLowerCase(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	o := e.offer(t)
	s := spec("train")
	s.OpenPorts = []provider.Port{{Number: 6443, Protocol: "TCP"}, {Number: 51820, Protocol: "UDP"}}
	if _, err := e.p.Prepare(context.Background(), &o, s); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	posts := e.api.Calls(http.MethodPost, "/firewall-rulesets")
	var rs struct {
		Rules []struct{ Protocol string }
	}
	if err := json.Unmarshal(posts[len(posts)-1].Body, &rs); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs.Rules {
		got = append(got, r.Protocol)
	}
	if !slices.Equal(got, []string{"tcp", "tcp", "udp"}) {
		t.Fatalf("protocols sent %v", got)
	}
	s = spec("other")
	s.OpenPorts = []provider.Port{{Number: 9, Protocol: "sctp"}}
	before := len(e.api.Calls(http.MethodPost, "/firewall-rulesets"))
	_, err := e.p.Prepare(context.Background(), &o, s)
	kindOf(t, err, provider.InvalidRequest)
	if after := len(e.api.Calls(http.MethodPost, "/firewall-rulesets")); after != before {
		t.Fatalf("a ruleset with protocol sctp was sent (%d creates)", after-before)
	}
}
