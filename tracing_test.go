package gpuprov_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// spanTree indexes the spans a recorder saw by parent.
type spanTree struct {
	spans    []sdktrace.ReadOnlySpan
	children map[trace.SpanID][]sdktrace.ReadOnlySpan
}

func newSpanTree(spans []sdktrace.ReadOnlySpan) *spanTree {
	t := &spanTree{spans: spans, children: map[trace.SpanID][]sdktrace.ReadOnlySpan{}}
	slices.SortStableFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	for _, s := range spans {
		t.children[s.Parent().SpanID()] = append(t.children[s.Parent().SpanID()], s)
	}
	return t
}

// named returns the children of s called name, in start order.
func (t *spanTree) named(s sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, c := range t.children[s.SpanContext().SpanID()] {
		if c.Name() == name {
			out = append(out, c)
		}
	}
	return out
}

// below returns every descendant of s called name.
func (t *spanTree) below(s sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, c := range t.children[s.SpanContext().SpanID()] {
		if c.Name() == name {
			out = append(out, c)
		}
		out = append(out, t.below(c, name)...)
	}
	return out
}

func (t *spanTree) childNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, c := range t.children[s.SpanContext().SpanID()] {
		out = append(out, c.Name())
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func recordingProvider(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return sr, tp
}

// A launch that fails over once is one trace under the caller's span: a
// gpuprov.Launch with an attempt per offer, each with its phases, each
// phase with its cloud calls; the failed attempt and its create carry the
// cloud's error kind, and a retried call its retry number and Retry-After.
func TestLaunchThatFailsOverOnceIsOneSpanTree(t *testing.T) {
	sr, tp := recordingProvider(t)
	e := newEnv(t, gpuprov.WithTracerProvider(tp))
	inZone := func(z string) func(*pt.Call) bool { return func(c *pt.Call) bool { return c.Location.Zone == z } }
	e.fake("a").Script(
		&pt.Rule{Op: pt.OpCreate, Match: inZone("us-east-1a"), Err: pe(provider.Capacity, "InsufficientInstanceCapacity"), Times: 1},
		&pt.Rule{Op: pt.OpPrepare, Match: inZone("us-east-1b"), Times: 1,
			Err: &provider.Error{Kind: provider.Transient, Op: "prepare", Provider: "a", Err: errors.New("429 slow down"), RetryAfter: 2 * time.Second}},
	)
	ctx, caller := tp.Tracer("caller").Start(context.Background(), "schedule job")
	vm, err := e.p.Launch(ctx, h100("train"))
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	if vm.Location.Zone != "us-east-1b" {
		t.Fatalf("ready in %s, want the second offer's zone", vm.Location)
	}

	tr := newSpanTree(sr.Ended())
	for _, s := range tr.spans {
		if s.SpanContext().TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("span %s is in trace %s, not the caller's", s.Name(), s.SpanContext().TraceID())
		}
	}
	roots := tr.children[caller.SpanContext().SpanID()]
	if len(roots) != 1 || roots[0].Name() != "gpuprov.Launch" {
		t.Fatalf("the caller's span has children %v, want one gpuprov.Launch", roots)
	}
	launch := roots[0]
	if launch.Status().Code == codes.Error || attr(launch, "gpuprov.vm").AsString() != "train" ||
		attr(launch, "gpuprov.state").AsString() != "ready" || attr(launch, "gpuprov.attempts").AsInt64() != 2 ||
		attr(launch, "cloud.availability_zone").AsString() != "us-east-1b" || attr(launch, "host.type").AsString() != "h100.1" {
		t.Errorf("gpuprov.Launch: status %v, attributes %v", launch.Status(), launch.Attributes())
	}
	attempts := tr.named(launch, "gpuprov.attempt")
	if len(attempts) != 2 {
		t.Fatalf("gpuprov.Launch has children %v, want two attempts", tr.childNames(launch))
	}

	first, second := attempts[0], attempts[1]
	if first.Status().Code != codes.Error || attr(first, "error.type").AsString() != "capacity" ||
		attr(first, "gpuprov.attempt").AsInt64() != 1 || attr(first, "cloud.availability_zone").AsString() != "us-east-1a" ||
		attr(first, "cloud.provider").AsString() != "a" {
		t.Errorf("first attempt: status %v, attributes %v", first.Status(), first.Attributes())
	}
	if got, want := tr.childNames(first), []string{"gpuprov.phase.prepare", "gpuprov.phase.create", "gpuprov.teardown"}; !slices.Equal(got, want) {
		t.Errorf("first attempt's children %v, want %v", got, want)
	}
	creates := tr.below(first, "gpuprov.cloud.create")
	if len(creates) != 1 {
		t.Fatalf("first attempt made %d create spans, want 1", len(creates))
	}
	c := creates[0]
	if c.Status().Code != codes.Error || attr(c, "error.type").AsString() != "capacity" ||
		attr(c, "host.type").AsString() != "h100.1" || attr(c, "cloud.region").AsString() != "us-east" ||
		attr(c, "cloud.availability_zone").AsString() != "us-east-1a" || !strings.Contains(c.Status().Description, "InsufficientInstanceCapacity") {
		t.Errorf("failed create: status %v, attributes %v", c.Status(), c.Attributes())
	}

	if second.Status().Code == codes.Error || attr(second, "gpuprov.attempt").AsInt64() != 2 ||
		attr(second, "cloud.availability_zone").AsString() != "us-east-1b" {
		t.Errorf("second attempt: status %v, attributes %v", second.Status(), second.Attributes())
	}
	names := tr.childNames(second)
	for _, want := range []string{"gpuprov.phase.prepare", "gpuprov.phase.create", "gpuprov.phase.boot"} {
		if !slices.Contains(names, want) {
			t.Errorf("second attempt's children %v lack %s", names, want)
		}
	}
	prep := tr.named(second, "gpuprov.phase.prepare")
	if len(prep) != 1 {
		t.Fatalf("second attempt has %d prepare phases", len(prep))
	}
	calls := tr.named(prep[0], "gpuprov.cloud.prepare")
	if len(calls) != 2 {
		t.Fatalf("the retried prepare made %d call spans, want 2", len(calls))
	}
	if attr(calls[0], "error.type").AsString() != "transient" || attr(calls[0], "gpuprov.retry_after_seconds").AsFloat64() != 2 {
		t.Errorf("throttled prepare: attributes %v", calls[0].Attributes())
	}
	if calls[1].Status().Code == codes.Error || attr(calls[1], "gpuprov.retry").AsInt64() != 1 {
		t.Errorf("retried prepare: status %v, attributes %v", calls[1].Status(), calls[1].Attributes())
	}
	var retried bool
	for _, ev := range prep[0].Events() {
		if ev.Name == "gpuprov.retry" {
			for _, kv := range ev.Attributes {
				if kv.Key == "gpuprov.retry_wait_seconds" && kv.Value.AsFloat64() >= 2 {
					retried = true
				}
			}
		}
	}
	if !retried {
		t.Errorf("the prepare phase does not say it waited out the Retry-After: events %v", prep[0].Events())
	}
	// The first attempt's cleanup, owed until the next offer was known
	// (another zone: not failover in place), is paid once the second
	// attempt is journaled, before it runs.
	got := tr.childNames(launch)
	want := []string{"gpuprov.cloud.plan", "gpuprov.cloud.plan", "gpuprov.attempt", "gpuprov.cloud.cleanup", "gpuprov.attempt"}
	if !slices.Equal(got, want) {
		t.Errorf("gpuprov.Launch has children %v, want %v (a plan per provider, the owed cleanup between the attempts)", got, want)
	}
}

// A refused request is a failed gpuprov.Launch span with the error's type
// and nothing below it.
func TestRefusedLaunchSpan(t *testing.T) {
	sr, tp := recordingProvider(t)
	e := newEnv(t, gpuprov.WithTracerProvider(tp))
	_, err := e.p.Launch(context.Background(), gpuprov.Request{Name: "Bad Name", GPU: "H100"})
	if err == nil {
		t.Fatal("a bad name was accepted")
	}
	spans := sr.Ended()
	if len(spans) != 1 || spans[0].Name() != "gpuprov.Launch" || spans[0].Status().Code != codes.Error ||
		attr(spans[0], "error.type").AsString() != "invalid-request" {
		for _, s := range spans {
			t.Logf("%s %v %v", s.Name(), s.Status(), s.Attributes())
		}
		t.Fatalf("%d spans, want one failed gpuprov.Launch", len(spans))
	}
}

// Delete, Sweep, Recover and Prune are spans of their own; Delete's
// teardown and calls are below it.
func TestOperationSpans(t *testing.T) {
	sr, tp := recordingProvider(t)
	e := newEnv(t, gpuprov.WithTracerProvider(tp))
	ctx := context.Background()
	if _, err := e.p.Launch(ctx, h100("train")); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Delete(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Sweep(ctx, gpuprov.SweepOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	tr := newSpanTree(sr.Ended())
	var roots []string
	for _, s := range tr.children[trace.SpanID{}] {
		roots = append(roots, s.Name())
	}
	if want := []string{"gpuprov.Launch", "gpuprov.Delete", "gpuprov.Sweep", "gpuprov.Recover", "gpuprov.Prune"}; !slices.Equal(roots, want) {
		t.Fatalf("root spans %v, want %v", roots, want)
	}
	del := tr.children[trace.SpanID{}][1]
	if len(tr.below(del, "gpuprov.cloud.delete")) == 0 || attr(del, "gpuprov.vm").AsString() != "train" {
		t.Errorf("gpuprov.Delete has children %v, attributes %v", tr.childNames(del), del.Attributes())
	}
	sweep := tr.children[trace.SpanID{}][2]
	if len(tr.named(sweep, "gpuprov.cloud.list")) != 2 {
		t.Errorf("gpuprov.Sweep has children %v, want a listing per provider", tr.childNames(sweep))
	}
	// Recover, after a clean Delete, finds nothing to do and reaps
	// nothing.
	rec := tr.children[trace.SpanID{}][3]
	if got := tr.childNames(rec); !slices.Equal(got, []string{"gpuprov.Reap"}) {
		t.Errorf("gpuprov.Recover has children %v", got)
	}
}

// A cluster is a gpuprov.LaunchCluster with a gpuprov.Launch per node;
// the node phases past boot (connect, bootstrap, join) are spans too.
func TestClusterSpans(t *testing.T) {
	sr, tp := recordingProvider(t)
	fn := newFakeNodes()
	e := newEnv(t, gpuprov.WithTracerProvider(tp), gpuprov.WithConnector(fn), gpuprov.WithBootstrapper(fn), gpuprov.WithJoiner(fn))
	if _, err := e.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{Name: "gpu", Nodes: 2, Node: h100("")}); err != nil {
		t.Fatal(err)
	}
	tr := newSpanTree(sr.Ended())
	roots := tr.children[trace.SpanID{}]
	if len(roots) != 1 || roots[0].Name() != "gpuprov.LaunchCluster" || attr(roots[0], "gpuprov.count").AsInt64() != 2 {
		t.Fatalf("root spans %v, want one gpuprov.LaunchCluster of 2 nodes", roots)
	}
	nodes := tr.named(roots[0], "gpuprov.Launch")
	if len(nodes) != 2 {
		t.Fatalf("gpuprov.LaunchCluster has children %v, want a gpuprov.Launch per node", tr.childNames(roots[0]))
	}
	for _, n := range nodes {
		if attr(n, "gpuprov.cluster").AsString() != "gpu" {
			t.Errorf("node span %v has no cluster", n.Attributes())
		}
		a := tr.named(n, "gpuprov.attempt")
		if len(a) != 1 {
			t.Fatalf("node %s: %d attempts", attr(n, "gpuprov.vm").AsString(), len(a))
		}
		got := tr.childNames(a[0])
		want := []string{"gpuprov.phase.prepare", "gpuprov.phase.create", "gpuprov.phase.boot", "gpuprov.phase.connect", "gpuprov.phase.bootstrap", "gpuprov.phase.join"}
		if !slices.Equal(got, want) {
			t.Errorf("node %s's attempt has children %v, want %v", attr(n, "gpuprov.vm").AsString(), got, want)
		}
	}
}

// BenchmarkLaunchTracing is BenchmarkLaunch with tracing off (the global
// provider, never set) and on (an SDK provider that records every span and
// exports none): what tracing costs a launch.
//
//	go test -run x -bench LaunchTracing -benchtime 2000x .
func BenchmarkLaunchTracing(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchLaunch(b) })
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider()
		defer tp.Shutdown(context.Background())
		benchLaunch(b, gpuprov.WithTracerProvider(tp))
	})
}

// A sampler that drops gpuprov's operation span drops what is below it,
// even under a caller's span that is sampled.
func TestDroppedLaunchSpanDropsItsChildren(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSampler(dropGpuprov{}))
	defer tp.Shutdown(context.Background())
	e := newEnv(t, gpuprov.WithTracerProvider(tp))
	ctx, caller := tp.Tracer("caller").Start(context.Background(), "schedule job")
	if _, err := e.p.Launch(ctx, h100("train")); err != nil {
		t.Fatal(err)
	}
	caller.End()
	for _, s := range sr.Ended() {
		if s.Name() != "schedule job" {
			t.Errorf("span %s recorded under a dropped gpuprov.Launch", s.Name())
		}
	}
}

// dropGpuprov samples every span but gpuprov.Launch.
type dropGpuprov struct{}

func (dropGpuprov) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == "gpuprov.Launch" {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}

func (dropGpuprov) Description() string { return "drop gpuprov.Launch" }
