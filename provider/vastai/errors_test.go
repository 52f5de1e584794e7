package vastai

import (
	"errors"
	"testing"
	"time"

	"github.com/org/gpuprov/internal/rest"
	"github.com/org/gpuprov/provider"
)

// TestClassify is built from the error answers Vast's OpenAPI document
// gives for the operations the adapter calls (createInstance,
// searchOffers, showInstances, destroyInstance: their schemas and
// examples), and, where it documents none, from the texts Vast uses
// elsewhere for the same condition (each row says which).
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name, op string
		status   int
		body     string
		after    time.Duration
		kind     provider.ErrorKind
		scope    provider.Scope
	}{
		// createInstance 410: "Offer no longer available (when cancel_unavail is true and instance cannot start)".
		{"ask taken", "create", 410, `{"success":false,"error":"no_such_ask","msg":"error 410/3907: no_such_ask Instance type 1234567 is no longer available.","ask_id":1234567}`, 0, provider.Capacity, provider.ScopeOffer},
		// createInstance 404: "Offer not found or not available", error invalid_args.
		{"ask not available", "create", 404, `{"success":false,"error":"invalid_args","msg":"error 404/3603: no_such_ask Instance type by id 1234567 is not available.","ask_id":1234567}`, 0, provider.Capacity, provider.ScopeOffer},
		{"ask gone, no text", "create", 404, `{"success":false}`, 0, provider.Capacity, provider.ScopeOffer},
		// createInstance 403 example: an offer this account may not rent.
		{"not your own offer", "create", 403, `{"success":false,"error":"invalid_args","msg":"error 403/3586: Offer 1234567 is not your own. Hosts can only rent their own machines.","ask_id":1234567}`, 0, provider.Unavailable, provider.ScopeOffer},
		{"forbidden", "observe", 403, `{"success":false,"error":"forbidden","msg":"key lacks instance_read"}`, 0, provider.Credentials, provider.ScopeProvider},
		// createInstance 400 (vast-ai/docs api-reference/openapi.yaml, PUT /api/v0/asks/{id}): its error enum is
		// invalid_args, invalid_price, no_ssh_key_for_vm, and its example is the invalid_args one below.
		{"invalid args", "create", 400, `{"success":false,"error":"invalid_args","msg":"error 400/3467: Invalid args: 'id' is required and must be a valid offer ID","ask_id":1234567}`, 0, provider.InvalidRequest, provider.ScopeOffer},
		// invalid_price: the adapter sends no price, so the ask's own is refused: that ask only. No example
		// in the document: the body carries the code alone.
		{"invalid price", "create", 400, `{"success":false,"error":"invalid_price","ask_id":1234567}`, 0, provider.Unavailable, provider.ScopeOffer},
		// no_ssh_key_for_vm: a VM ask needs an account key (the document's Key Quirks); a container ask does not.
		{"no ssh key for a VM ask", "create", 400, `{"success":false,"error":"no_ssh_key_for_vm","ask_id":1234567}`, 0, provider.Unavailable, provider.ScopeOffer},
		// A 400 the document does not describe (no code of its enum): the next offer, never an abort. Its
		// msg is this test's placeholder; no Vast reference gives such an answer's text.
		{"undocumented 400 on create", "create", 400, `{"success":false,"msg":"an answer createInstance does not document"}`, 0, provider.Failed, provider.ScopeOffer},
		{"undocumented 400 code on create", "create", 400, `{"success":false,"error":"some_new_code","msg":"?"}`, 0, provider.Failed, provider.ScopeOffer},
		{"undocumented 400 without a body", "create", 400, ``, 0, provider.Failed, provider.ScopeOffer},
		// showInstances 400: invalid filter column, order_by or after_token.
		{"invalid token", "observe", 400, `{"error":"invalid_token","msg":"invalid after_token"}`, 0, provider.InvalidRequest, provider.ScopeOffer},
		// showInstance 401 example: auth_error, "Invalid user key".
		{"bad key", "observe", 401, `{"success":false,"error":"auth_error","msg":"Invalid user key"}`, 0, provider.Credentials, provider.ScopeProvider},
		// searchOffers 404: "Unauthorized - invalid or missing API key", msg "Invalid user key".
		{"bad key on the search", "plan", 404, `{"error":"auth_error","msg":"Invalid user key"}`, 0, provider.Credentials, provider.ScopeProvider},
		{"bad key on a create", "create", 404, `{"msg":"Invalid user key"}`, 0, provider.Credentials, provider.ScopeProvider},
		// Not documented on createInstance: prepayInstance's 411 "Insufficient credit", transferCredit's
		// insufficient_balance, the CLI's "Insufficient credits" (vast-cli vastai/SKILL.md).
		{"insufficient credit", "create", 411, `{"success":false,"msg":"Insufficient credit"}`, 0, provider.Quota, provider.ScopeProvider},
		{"insufficient balance code", "create", 400, `{"success":false,"error":"insufficient_balance","msg":"balance too low"}`, 0, provider.Quota, provider.ScopeProvider},
		{"payment required", "create", 402, ``, 0, provider.Quota, provider.ScopeProvider},
		// createInstance/showInstances/destroyInstance 429: {"detail": "API requests too frequent endpoint threshold=N"}.
		{"throttled", "plan", 429, `{"detail":"API requests too frequent endpoint threshold=4.5"}`, 2 * time.Second, provider.Transient, provider.ScopeOffer},
		{"throttled delete", "delete", 429, `{"success":false,"error":"rate_limit_exceeded","msg":"API requests too frequent endpoint threshold=3.0"}`, 0, provider.Transient, provider.ScopeOffer},
		{"server", "create", 503, `<html>Service Unavailable</html>`, 0, provider.Transient, provider.ScopeOffer},
		// destroyInstance 404 is success in Delete (isGone); anywhere else it is Failed.
		{"not found", "delete", 404, `{"success":false,"error":"not_found","msg":"Instance not found"}`, 0, provider.Failed, provider.ScopeOffer},
		{"other", "observe", 409, `{"success":false,"error":"conflict","msg":"?"}`, 0, provider.Failed, provider.ScopeOffer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			re := &rest.Error{Status: tc.status, Body: []byte(tc.body), RetryAfter: tc.after}
			pe := classifyAPI("vastai", tc.op, parseError(re))
			if pe.Kind != tc.kind || pe.Scope() != tc.scope || pe.RetryAfter != tc.after {
				t.Fatalf("got %s/%s/%s, want %s/%s/%s (%v)", pe.Kind, pe.Scope(), pe.RetryAfter, tc.kind, tc.scope, tc.after, pe)
			}
			var ae *APIError
			if !errors.As(pe, &ae) || ae.Status != tc.status {
				t.Fatalf("%v does not wrap the API error", pe)
			}
			if rest.StatusOf(pe) != tc.status {
				t.Fatalf("rest.StatusOf(%v) = %d, want %d", pe, rest.StatusOf(pe), tc.status)
			}
		})
	}
}

func TestIsGone(t *testing.T) {
	gone := classifyAPI("vastai", "delete", parseError(&rest.Error{Status: 404, Body: []byte(`{"success":false,"error":"not_found","msg":"Instance not found"}`)}))
	auth := classifyAPI("vastai", "delete", parseError(&rest.Error{Status: 404, Body: []byte(`{"error":"auth_error","msg":"Invalid user key"}`)}))
	if !isGone(gone) || isGone(auth) {
		t.Fatalf("isGone(not_found) = %v, isGone(bad key) = %v", isGone(gone), isGone(auth))
	}
}

func TestParseErrorKeepsTheText(t *testing.T) {
	e := parseError(&rest.Error{Status: 410, Body: []byte(`{"success":false,"error":"no_such_ask","msg":"error 410/3907: no_such_ask Instance type 7 is no longer available.","ask_id":7}`)})
	if e.Code != "no_such_ask" || e.AskID != 7 || e.Error() != "HTTP 410 no_such_ask: error 410/3907: no_such_ask Instance type 7 is no longer available." {
		t.Fatalf("%+v: %s", e, e)
	}
	if e := parseError(&rest.Error{Status: 502, Body: []byte("bad gateway")}); e.Msg != "bad gateway" {
		t.Fatalf("%+v", e)
	}
}
