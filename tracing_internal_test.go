package gpuprov

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/org/gpuprov/provider"
)

// With tracing off, an operation costs its one span start (what the
// OpenTelemetry API allocates for it) and everything below it nothing: no
// attempt, phase or call span is started, and no attribute is built. The
// bounds are the ones docs/observability.md states.
func TestTracingOffAllocations(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		p     *Provisioner
		bound float64
	}{
		{"global provider never set", &Provisioner{}, 3},
		{"no-op provider", &Provisioner{tracerProvider: noop.NewTracerProvider()}, 1},
	} {
		c.p.initTracer()
		op := testing.AllocsPerRun(1000, func() {
			octx, sp := c.p.startOp(ctx, "gpuprov.Launch")
			if sp.IsRecording() || trace.SpanFromContext(octx).IsRecording() {
				t.Fatal("a span records with tracing off")
			}
			endSpan(sp, nil)
		})
		if op > c.bound {
			t.Errorf("%s: an operation's span start allocates %.0f times, bound %.0f", c.name, op, c.bound)
		}
		pp := &paced{CloudProvider: nil, tracer: c.p.tracer}
		below := testing.AllocsPerRun(1000, func() {
			actx, sp := c.p.child(ctx, "gpuprov.attempt", "")
			actx = withCallTags(withRetry(actx, 1), "h100.1")
			cctx, csp := child(actx, pp.tracer, callSpan, "create")
			traceRetry(cctx, "create", 1, 0, 0)
			endSpan(csp, provider.Capacity)
			endSpan(sp, nil)
		})
		if below != 0 {
			t.Errorf("%s: the spans below an operation allocate %.0f times, want 0", c.name, below)
		}
	}
}
