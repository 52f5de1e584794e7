package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider/providertest"
)

// otlpReceiver is an OTLP/HTTP trace endpoint: it decodes what the
// exporter posts to /v1/traces with the OTLP protobuf types.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []string // span names
	services []string // resources' service.name
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		http.Error(w, "want a POST of protobuf to /v1/traces", http.StatusBadRequest)
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				o.services = append(o.services, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans = append(o.spans, s.Name)
			}
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, a launch's spans reach the
// collector over OTLP/HTTP, under the fleet's service name.
func TestTracesExportedOverOTLP(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	ctx := context.Background()
	opt, stop, err := tracing(ctx)
	if err != nil || opt == nil {
		t.Fatalf("tracing: %v, option %v", err, opt)
	}
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clk := clock.NewFake(clock.Real.Now())
	defer clk.AutoAdvance()()
	f := providertest.NewFake("a", clk, providertest.Offer("r1", "", "t", "H100-80GB", 1, 2))
	f.Installation = db.Installation()
	p, err := gpuprov.New(db, gpuprov.WithProvider(f), gpuprov.WithClock(clk), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Launch(ctx, gpuprov.Request{Name: "fleet-0", GPU: "H100"}); err != nil {
		t.Fatal(err)
	}
	if err := stop(ctx); err != nil { // flushes the batch
		t.Fatal(err)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, want := range []string{"gpuprov.Launch", "gpuprov.attempt", "gpuprov.phase.create", "gpuprov.cloud.create"} {
		if !slices.Contains(recv.spans, want) {
			t.Errorf("the collector got spans %v, not %s", recv.spans, want)
		}
	}
	if len(recv.services) == 0 || recv.services[0] != "fleet" {
		t.Errorf("service.name %v, want fleet", recv.services)
	}
}

// Without an OTLP endpoint nothing is exported; a protocol the fleet does
// not speak is refused by name, before anything runs.
func TestTracingSettings(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if opt, _, err := tracing(context.Background()); opt != nil || err != nil {
		t.Fatalf("no endpoint: option %v, error %v", opt, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	_, _, err := tracing(context.Background())
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc") {
		t.Fatalf("grpc protocol: error %v, want one naming the setting", err)
	}
}
