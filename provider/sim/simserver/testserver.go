package simserver

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/org/gpuprov/clock"
)

// An Option adjusts the server NewServer starts. Options apply to a copy of
// DefaultOptions() (or of WithOptions' Options) in the order given.
type Option func(*Options) error

// NewServer starts a server for a test, in the manner of
// net/http/httptest.NewServer: on 127.0.0.1 with a free port, with a
// temporary state folder, serving the clouds of DefaultOptions() ("sim-a"
// and "sim-b") unless WithOptions says otherwise, adjusted by opts. It
// registers tb.Cleanup to Close the server (a Close error fails the test)
// and fails the test with tb.Fatal if the server cannot start or an
// option is invalid, so it never returns nil.
//
// Programs that are not tests use Start.
func NewServer(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	o := DefaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			tb.Fatalf("simserver.NewServer: %v", err)
		}
	}
	s, err := Start(o)
	if err != nil {
		tb.Fatalf("simserver.NewServer: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("simserver: Close: %v", err)
		}
	})
	return s
}

// WithOptions replaces the options NewServer starts from (DefaultOptions()
// otherwise) with o; the options after it adjust o. Use it for clouds of
// your own, a state file, or hooks such as k3semu.Attach sets.
func WithOptions(o Options) Option {
	return func(dst *Options) error { *dst = o; return nil }
}

// WithFaults sets the faults cloud injects from the start ("*" for every
// cloud), replacing its CloudConfig.Faults. An unknown cloud, or faults
// Server.SetFaults would refuse, fail NewServer. Change them later with
// Server.SetFaults.
func WithFaults(cloud string, f Faults) Option {
	return func(o *Options) error {
		if err := f.validate(); err != nil {
			return err
		}
		found := false
		for i := range o.Clouds {
			if cloud == "*" || o.Clouds[i].Name == cloud {
				o.Clouds[i].Faults, found = f, true
			}
		}
		if !found {
			return fmt.Errorf("WithFaults: %w %q", ErrUnknownCloud, cloud)
		}
		return nil
	}
}

// WithTiming sets how long every cloud takes (Options.Timing), overriding
// each CloudConfig.Timing. Timing{} makes API calls, boots and deletes
// instant, which is what most tests want.
func WithTiming(t Timing) Option {
	return func(o *Options) error {
		o.Timing = &t
		for i := range o.Clouds {
			o.Clouds[i].Timing = nil
		}
		return nil
	}
}

// WithClock sets the server's clock (Options.Clock): with a clock.Fake,
// every latency, boot, delete, listing lag and retention runs on virtual
// time that the test advances.
func WithClock(c clock.Clock) Option {
	return func(o *Options) error { o.Clock = c; return nil }
}

// WithSeed seeds the random faults and boot jitter (Options.Seed).
func WithSeed(seed uint64) Option {
	return func(o *Options) error { o.Seed = seed; return nil }
}

// WithoutSSH runs no SSH server per instance (Options.DisableSSH): running
// instances report 127.0.0.1:DisabledSSHPort, where nothing listens. For
// tests that launch many instances and never log in.
func WithoutSSH() Option {
	return func(o *Options) error { o.DisableSSH = true; return nil }
}

// WithLogger sends the server's logs to l (Options.Logger); they never
// carry an API key or the admin token.
func WithLogger(l *slog.Logger) Option {
	return func(o *Options) error { o.Logger = l; return nil }
}
