// Package redact keeps an adapter's credentials out of every error text it
// hands to the core. The core journals error texts, prints them and hands
// them to event sinks, and a vendor's error answer (or a proxy in front of
// it) may echo the request's Authorization header or query string back, so
// each adapter runs its errors through a Secrets built from its own
// credentials before they leave the adapter.
//
//	sec := redact.New(cfg.APIKey)
//	return sec.Error(err) // err's text with every form of the key replaced
//
// A value is replaced in the forms it travels in: as typed, URL-encoded,
// and base64-encoded the way HTTP Basic authentication sends it
// ("key:" and ":key", and the key alone).
package redact

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Mask is what stands in an error text where a secret stood.
const Mask = "[REDACTED]"

// minLen is the shortest value treated as a secret: replacing a one- or
// two-letter value would mangle every message and protect nothing.
const minLen = 6

// Secrets is a set of values that must never appear in an error text. The
// zero value and nil hold nothing. It is safe for concurrent use once built.
type Secrets struct {
	forms []string // longest first, so a value's longer form is replaced whole
}

// New returns the set holding values and the encoded forms they travel in.
// Empty values and values shorter than six bytes are ignored.
func New(values ...string) *Secrets {
	seen := map[string]bool{}
	s := &Secrets{}
	add := func(v string) {
		if len(v) >= minLen && !seen[v] {
			seen[v] = true
			s.forms = append(s.forms, v)
		}
	}
	for _, v := range values {
		if len(v) < minLen {
			continue
		}
		add(v)
		add(url.QueryEscape(v))
		add(url.PathEscape(v))
		for _, b := range []string{v, v + ":", ":" + v} {
			add(base64.StdEncoding.EncodeToString([]byte(b)))
			add(base64.RawStdEncoding.EncodeToString([]byte(b)))
			add(base64.URLEncoding.EncodeToString([]byte(b)))
		}
	}
	sort.SliceStable(s.forms, func(i, j int) bool { return len(s.forms[i]) > len(s.forms[j]) })
	return s
}

// String returns text with every form of every secret replaced by Mask.
func (s *Secrets) String(text string) string {
	if s == nil {
		return text
	}
	for _, f := range s.forms {
		if strings.Contains(text, f) {
			text = strings.ReplaceAll(text, f, Mask)
		}
	}
	return text
}

// Bytes is String for a byte slice; it returns b itself when nothing in it
// is secret.
func (s *Secrets) Bytes(b []byte) []byte {
	if s == nil {
		return b
	}
	t := string(b)
	if r := s.String(t); r != t {
		return []byte(r)
	}
	return b
}

// Contains reports whether text holds any form of a secret.
func (s *Secrets) Contains(text string) bool {
	return s != nil && s.String(text) != text
}

// Error returns err unchanged when its text holds no secret, and otherwise
// an error whose text is err's with the secrets masked. The masked error
// does not unwrap to err: a vendor error type reached through errors.As
// could still hand out the unmasked text, so the chain ends here. Classify
// an error before masking it.
func (s *Secrets) Error(err error) error {
	if err == nil || s == nil {
		return err
	}
	t := err.Error()
	r := s.String(t)
	if r == t {
		return err
	}
	return &masked{text: r}
}

type masked struct{ text string }

func (m *masked) Error() string { return m.text }

// Tokens remembers the credentials of the last few Authorization headers a
// client sent (an access token lives about an hour), so that an answer
// echoing one can be masked. The zero value is ready; it is safe for
// concurrent use.
type Tokens struct {
	mu   sync.Mutex
	seen []string // newest last
}

// keepTokens is how many distinct tokens Tokens remembers.
const keepTokens = 8

// Note remembers the credential of h's Authorization header, the part
// after the scheme ("Bearer …"), if it has one.
func (t *Tokens) Note(h http.Header) {
	a := h.Get("Authorization")
	if a == "" {
		return
	}
	if i := strings.IndexByte(a, ' '); i > 0 {
		a = strings.TrimSpace(a[i+1:])
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if slices.Contains(t.seen, a) {
		return
	}
	t.seen = append(t.seen, a)
	if len(t.seen) > keepTokens {
		t.seen = t.seen[len(t.seen)-keepTokens:]
	}
}

// Values returns the credentials remembered, oldest first.
func (t *Tokens) Values() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.seen)
}
