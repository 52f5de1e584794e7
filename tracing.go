package gpuprov

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
)

// tracerName is the instrumentation scope of gpuprov's spans.
const tracerName = "github.com/org/gpuprov"

// WithTracerProvider makes the Provisioner trace its operations with tp: a
// span per Launch, LaunchCluster, Delete, Recover, Sweep and Prune, a child
// per attempt, per phase and per cloud primitive call (see
// docs/observability.md, "Traces"). Without it, the global provider
// (otel.GetTracerProvider, at New) is used; while that is the default no-op
// one, an operation costs one span start that records nothing, and its
// children are not started at all.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(p *Provisioner) { p.tracerProvider = tp }
}

// Attribute keys. The cloud.*, host.type and error.type keys are
// OpenTelemetry's semantic conventions; gpuprov.* are this library's.
const (
	attrCloudProvider = attribute.Key("cloud.provider")
	attrCloudRegion   = attribute.Key("cloud.region")
	attrCloudZone     = attribute.Key("cloud.availability_zone")
	attrHostType      = attribute.Key("host.type") // the instance type
	attrErrorType     = attribute.Key("error.type")

	attrVM         = attribute.Key("gpuprov.vm")
	attrCluster    = attribute.Key("gpuprov.cluster")
	attrGPU        = attribute.Key("gpuprov.gpu")
	attrGPUCount   = attribute.Key("gpuprov.gpu_count")
	attrAttempt    = attribute.Key("gpuprov.attempt")
	attrAttempts   = attribute.Key("gpuprov.attempts")
	attrResumed    = attribute.Key("gpuprov.resumed")
	attrState      = attribute.Key("gpuprov.state")
	attrOp         = attribute.Key("gpuprov.op")
	attrRetry      = attribute.Key("gpuprov.retry")
	attrRetryAfter = attribute.Key("gpuprov.retry_after_seconds")
	attrRetryWait  = attribute.Key("gpuprov.retry_wait_seconds")
	attrPacingWait = attribute.Key("gpuprov.pacing_wait_seconds")
	attrCount      = attribute.Key("gpuprov.count")
)

// noSpan is what an operation gets when nothing records it: ending it does
// nothing, and it was made once.
var noSpan trace.Span = noop.Span{}

func (p *Provisioner) initTracer() {
	tp := p.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	p.tracer = tp.Tracer(tracerName)
}

// startOp starts the span of a public operation (gpuprov.Launch, ...), a
// child of the caller's span in ctx if there is one. When the span does not
// record (tracing off, or sampled out), the context still carries it, so
// the operation's children see a parent that does not record and start no
// span of their own, even under a caller's span that records.
func (p *Provisioner) startOp(ctx context.Context, name string) (context.Context, trace.Span) {
	if p.tracer == nil {
		return ctx, noSpan
	}
	sctx, sp := p.tracer.Start(ctx, name)
	if !sp.IsRecording() {
		return sctx, noSpan
	}
	return sctx, sp
}

// child starts span prefix+name under ctx's span, only when that one
// records (the name is not even built otherwise).
func child(ctx context.Context, tracer trace.Tracer, prefix, name string) (context.Context, trace.Span) {
	if tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return tracer.Start(ctx, prefix+name)
}

// Span name prefixes: a phase's span is gpuprov.phase.<phase>, a cloud
// call's gpuprov.cloud.<op> (both sets are small and fixed; see Call.Op).
const (
	phaseSpan = "gpuprov.phase."
	callSpan  = "gpuprov.cloud."
)

// child is the package child with the Provisioner's tracer.
func (p *Provisioner) child(ctx context.Context, prefix, name string) (context.Context, trace.Span) {
	return child(ctx, p.tracer, prefix, name)
}

// endSpan ends sp, marking it failed with err's kind when err is not nil.
func endSpan(sp trace.Span, err error) {
	if !sp.IsRecording() {
		return
	}
	if err != nil {
		sp.SetAttributes(attrErrorType.String(errorTypeOf(err)))
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// errorTypeOf is the error.type of err: the error kind the journal records
// (a provider.ErrorKind name, canceled, deadline, no-offers, or the phase
// that failed), invalid-request for a refused request, journal for a failed
// journal write. Never the message, which names VMs and ids.
func errorTypeOf(err error) string {
	var re *RequestError
	var je *journalError
	switch {
	case errors.As(err, &re):
		return provider.InvalidRequest.String()
	case errors.As(err, &je):
		return "journal"
	}
	return errorKindName(err)
}

// attemptAttrs are the attributes of the span of attempt a, on offer o.
func attemptAttrs(a *journal.Attempt, o *provider.Offer, resumed bool) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attrAttempt.Int(a.N), attrCloudProvider.String(a.Provider), attrCloudRegion.String(a.Region),
		attrHostType.String(o.InstanceType),
	}
	if a.Zone != "" {
		attrs = append(attrs, attrCloudZone.String(a.Zone))
	}
	if resumed {
		attrs = append(attrs, attrResumed.Bool(true))
	}
	return attrs
}

// vmAttrs are the attributes of a VM's outcome, for the span of the
// operation that drove it.
func vmAttrs(vm *VM) []attribute.KeyValue {
	if vm == nil {
		return nil
	}
	attrs := []attribute.KeyValue{attrState.String(string(vm.State)), attrAttempts.Int(vm.Attempt)}
	if vm.Provider != "" {
		attrs = append(attrs, attrCloudProvider.String(vm.Provider), attrCloudRegion.String(vm.Location.Region))
		if vm.Location.Zone != "" {
			attrs = append(attrs, attrCloudZone.String(vm.Location.Zone))
		}
		if vm.InstanceType != "" {
			attrs = append(attrs, attrHostType.String(vm.InstanceType))
		}
	}
	return attrs
}

// callTags are what a cloud call's span says beyond its op and location:
// the instance type of the attempt it serves and its retry number. They
// ride in the context only while a span records.
type (
	callTags    struct{ instanceType string }
	callTagsKey struct{}
	retryKey    struct{}
)

func withCallTags(ctx context.Context, instanceType string) context.Context {
	if instanceType == "" || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	return context.WithValue(ctx, callTagsKey{}, callTags{instanceType})
}

func withRetry(ctx context.Context, n int) context.Context {
	if n == 0 || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	return context.WithValue(ctx, retryKey{}, n)
}

// callAttrs are the attributes of the span of cloud call op in loc.
func callAttrs(ctx context.Context, prov, op string, loc provider.Location) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attrCloudProvider.String(prov), attrOp.String(op)}
	if loc.Region != "" {
		attrs = append(attrs, attrCloudRegion.String(loc.Region))
	}
	if loc.Zone != "" {
		attrs = append(attrs, attrCloudZone.String(loc.Zone))
	}
	if t, ok := ctx.Value(callTagsKey{}).(callTags); ok {
		attrs = append(attrs, attrHostType.String(t.instanceType))
	}
	if n, ok := ctx.Value(retryKey{}).(int); ok {
		attrs = append(attrs, attrRetry.Int(n))
	}
	return attrs
}

// traceRetry notes on ctx's span that op is retried (retry n) after wait,
// which honours the cloud's Retry-After when it gave one.
func traceRetry(ctx context.Context, op string, n int, wait, retryAfter time.Duration) {
	sp := trace.SpanFromContext(ctx)
	if !sp.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attrOp.String(op), attrRetry.Int(n), attrRetryWait.Float64(wait.Seconds())}
	if retryAfter > 0 {
		attrs = append(attrs, attrRetryAfter.Float64(retryAfter.Seconds()))
	}
	sp.AddEvent("gpuprov.retry", trace.WithAttributes(attrs...))
}
