package redact

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestSecretsMaskEveryForm(t *testing.T) {
	const key = "secret_key+with/odd=chars"
	s := New(key, "", "abc")
	for _, form := range []string{
		key,
		url.QueryEscape(key),
		base64.StdEncoding.EncodeToString([]byte(key + ":")),
		base64.StdEncoding.EncodeToString([]byte(":" + key)),
		base64.StdEncoding.EncodeToString([]byte(key)),
	} {
		text := `{"error":"unauthorized","echo":"Authorization: Basic ` + form + `"}`
		got := s.String(text)
		if strings.Contains(got, form) || !strings.Contains(got, Mask) {
			t.Errorf("String(%q) = %q: the form %q is still there", text, got, form)
		}
	}
	if got := s.String("abc def"); got != "abc def" {
		t.Errorf("a value shorter than %d bytes was masked: %q", minLen, got)
	}
}

func TestErrorMasksAndEndsTheChain(t *testing.T) {
	const key = "sk-live-0123456789"
	s := New(key)
	vendor := errors.New("HTTP 401: bad token Bearer " + key)
	err := s.Error(fmt.Errorf("GET /instances: %w", vendor))
	if strings.Contains(err.Error(), key) {
		t.Fatalf("masked error still holds the key: %q", err)
	}
	if !strings.Contains(err.Error(), "GET /instances: HTTP 401: bad token Bearer "+Mask) {
		t.Fatalf("masked error lost its context: %q", err)
	}
	if errors.Is(err, vendor) {
		t.Fatal("masked error unwraps to the vendor error that holds the key")
	}
	clean := errors.New("HTTP 500: internal")
	if got := s.Error(clean); got != clean {
		t.Fatalf("an error without a secret was replaced: %v", got)
	}
	var nilSet *Secrets
	if got := nilSet.Error(vendor); got != vendor {
		t.Fatal("a nil set changed an error")
	}
}

// Tokens keeps the credential of each Authorization header once, the last
// few only, whatever the scheme.
func TestTokensRemembersTheLastFew(t *testing.T) {
	var tk Tokens
	tk.Note(http.Header{})
	for i := range keepTokens + 2 {
		tk.Note(http.Header{"Authorization": {fmt.Sprintf("Bearer tok-%d", i)}})
		tk.Note(http.Header{"Authorization": {fmt.Sprintf("Bearer tok-%d", i)}})
	}
	tk.Note(http.Header{"Authorization": {"raw-token"}})
	got := tk.Values()
	if len(got) != keepTokens || got[len(got)-1] != "raw-token" || got[len(got)-2] != fmt.Sprintf("tok-%d", keepTokens+1) || slices.Contains(got, "tok-0") {
		t.Fatalf("remembered %q", got)
	}
}
