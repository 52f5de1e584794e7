package provider

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestUnknownGPUSuggests: a typo of a GPU name is answered with the nearest
// known names, not the whole table; a name near nothing lists the table.
func TestUnknownGPUSuggests(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // suggestions, in order; nil: none
	}{
		{"H1OO", []string{"H100-80GB"}},            // letter O for zero
		{"h10", []string{"H100-80GB", "H100-NVL"}}, // a digit short: both start so
		{"a100-80", []string{"A100-80GB"}},         // the memory half-typed
		{"L4O", []string{"L40"}},                   // look-alike
		{"rtx409", []string{"RTX4090"}},            // one digit short
		{"H900", []string{"H100-80GB", "H200"}},    // as near one as the other
		{"nosuchgpu", nil},
		{"tpu-v5", nil},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := CanonicalGPU(tc.in)
			var ue *UnknownGPUError
			if !errors.As(err, &ue) {
				t.Fatalf("CanonicalGPU(%q) = %v, want an *UnknownGPUError", tc.in, err)
			}
			if !slices.Equal(ue.Suggestions, tc.want) {
				t.Errorf("suggestions %q, want %q", ue.Suggestions, tc.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.in) {
				t.Errorf("%q does not name the input", msg)
			}
			if tc.want == nil {
				if !strings.Contains(msg, "known: A10, A100-40GB") {
					t.Errorf("%q: with nothing near, want the known names", msg)
				}
				return
			}
			if !strings.Contains(msg, "did you mean "+tc.want[0]) {
				t.Errorf("%q lacks %q", msg, "did you mean "+tc.want[0])
			}
			if strings.Contains(msg, "known:") || len(msg) > 100 {
				t.Errorf("%q: want the suggestion alone, not the table", msg)
			}
		})
	}
}

func TestSeverityText(t *testing.T) {
	for _, s := range []Severity{Info, Warn, Critical} {
		b, _ := s.MarshalText()
		var got Severity
		if err := got.UnmarshalText(b); err != nil || got != s {
			t.Errorf("%v round-trips to %v, %v", s, got, err)
		}
	}
	var s Severity
	if err := s.UnmarshalText([]byte("dire")); err == nil {
		t.Error("an unknown severity was read")
	}
}
