package primeintellect_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/primeintellect"
	"github.com/org/gpuprov/provider/primeintellect/primemock"
)

// pod.image is the enum EnvironmentTypeEnum in Prime's OpenAPI document
// (compute API 0.1.0, api-evangelist/prime-intellect
// openapi/_original/prime-intellect-compute-api-openapi.yml). A container
// image reference is not one of its values.
const dockerImage = "nvcr.io/nvidia/pytorch:24.01-py3"

// TestConfigRefusesAnImageOutsideTheEnum: a configured image Prime cannot
// take is a config error naming the allowed values, before any request.
func TestConfigRefusesAnImageOutsideTheEnum(t *testing.T) {
	_, err := primeintellect.New(primeintellect.Config{APIKey: apiKey, Image: dockerImage})
	if !errors.Is(err, primeintellect.ErrImage) || !strings.Contains(err.Error(), dockerImage) ||
		!strings.Contains(err.Error(), "ubuntu_22_cuda_12") || !strings.Contains(err.Error(), "cuda_12_6_pytorch_2_7") {
		t.Fatalf("err %v, want one naming the image and the allowed values", err)
	}
	conf := func(into any) error { return json.Unmarshal([]byte(`{"api_key":"k","image":"ubuntu:22.04"}`), into) }
	if _, err := provider.Build("primeintellect", provider.Settings{Decode: conf}); !errors.Is(err, primeintellect.ErrImage) {
		t.Fatalf("factory: %v", err)
	}
	if _, err := primeintellect.New(primeintellect.Config{APIKey: apiKey, Image: "cuda_12_4_pytorch_2_5"}); err != nil {
		t.Fatalf("an image of the enum: %v", err)
	}
}

// TestRequestImageOutsideTheEnumIsNotSent: a request's image that Prime
// cannot take makes the offer Unavailable at Prepare (the launch moves on
// to another cloud) and nothing is sent: no key, no pod. Before, the pod
// was sent and Prime's 422 aborted the whole launch as InvalidRequest.
func TestRequestImageOutsideTheEnumIsNotSent(t *testing.T) {
	e := newEnv(t, primeintellect.Config{})
	o := e.offer(t)
	s := spec("x")
	s.Image = dockerImage
	prep, err := e.p.Prepare(context.Background(), &o, s)
	if err == nil {
		_, err = e.p.Create(context.Background(), &o, prep, s)
	}
	kindOf(t, err, provider.Unavailable)
	if !errors.Is(err, primeintellect.ErrImage) || !strings.Contains(err.Error(), "ubuntu_22_cuda_12") {
		t.Fatalf("error does not name the allowed values: %v", err)
	}
	if n := len(e.api.Calls(http.MethodPost, "")); n != 0 {
		t.Fatalf("%d requests sent for an image Prime refuses", n)
	}
}

// TestMockAnswersAnInvalidImageAsDocumented: the mock refuses an image
// outside the enum with the documented 422 ErrorResponse shape.
func TestMockAnswersAnInvalidImageAsDocumented(t *testing.T) {
	e := newEnv(t, primeintellect.Config{})
	req, _ := http.NewRequest(http.MethodPost, base+"/pods/", strings.NewReader(
		`{"pod":{"cloudId":"c","gpuType":"H100_80GB","socket":"SXM5","gpuCount":1,"image":"`+dockerImage+`"},"provider":{"type":"runpod"}}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := e.MT.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Errors []struct{ Param, Details string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 422 || len(body.Errors) != 1 || body.Errors[0].Param != "pod.image" {
		t.Fatalf("mock answered %d %+v %v", resp.StatusCode, body, err)
	}
}

// TestUndocumentedCreateFailureMovesOn: Prime documents no stockout answer;
// a create failure whose text the adapter does not know (and is not auth,
// wallet or validation) is Unavailable: the next offer is tried, the
// launch is not aborted.
func TestUndocumentedCreateFailureMovesOn(t *testing.T) {
	e := newEnv(t, primeintellect.Config{})
	o := e.offer(t)
	prep, err := e.p.Prepare(context.Background(), &o, spec("x"))
	if err != nil {
		t.Fatal(err)
	}
	e.api.Fail(primemock.Fault{Method: http.MethodPost, Path: "/pods/", Status: 400,
		Body: `{"detail":"No machines matching your request right now"}`, Times: 1})
	_, err = e.p.Create(context.Background(), &o, prep, spec("x"))
	if pe := kindOf(t, err, provider.Unavailable); pe.Scope() != provider.ScopeOffer {
		t.Fatalf("scope %s", pe.Scope())
	}
}

// TestPlanRefusesARequestImageOutsideTheEnum: a request whose image Prime
// cannot run gets no offer from Prime, and Plan's error names the allowed
// values (the core reports it in the no-offers error), before any request.
func TestPlanRefusesARequestImageOutsideTheEnum(t *testing.T) {
	e := newEnv(t, primeintellect.Config{})
	_, err := e.p.Plan(context.Background(), &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1, Image: dockerImage})
	kindOf(t, err, provider.Unavailable)
	if !errors.Is(err, primeintellect.ErrImage) || !strings.Contains(err.Error(), "ubuntu_22_cuda_12") {
		t.Fatalf("error does not name the allowed values: %v", err)
	}
	if n := len(e.api.Calls("", "")); n != 0 {
		t.Fatalf("%d requests sent for an image Prime refuses", n)
	}
	offers, err := e.p.Plan(context.Background(), &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 1, Image: "ubuntu_22_cuda_12"})
	if err != nil || len(offers) == 0 {
		t.Fatalf("an image of the enum: %v, %d offers", err, len(offers))
	}
}
