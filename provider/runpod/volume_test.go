package runpod_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/runpod"
	"github.com/org/gpuprov/provider/runpod/runpodmock"
)

var texas = provider.Location{Region: "US-TX-3"}

func volumeSpec(name string, sizeGB int, loc provider.Location) provider.VolumeSpec {
	return provider.VolumeSpec{Name: name, Installation: installation, SizeGB: sizeGB, Location: loc,
		IdempotencyToken: "tok-" + name}
}

// secureOffer is the Secure Cloud H100 SXM offer in dc.
func (e *env) secureOffer(t *testing.T, dc string) provider.Offer {
	t.Helper()
	for _, o := range e.offers(t) {
		if o.Location.Region == dc && strings.HasSuffix(o.InstanceType, " secure") {
			return o
		}
	}
	t.Fatalf("no secure offer in %s", dc)
	return provider.Offer{}
}

// createBody is the part of a POST /pods body a volume changes.
type createBody struct {
	Cloud         string
	DataCenterIDs []string
	Mounts        *struct {
		Network []struct {
			VolumeID string `json:"volumeId"`
			Path     string `json:"path"`
		} `json:"network"`
	} `json:"mounts"`
}

func lastCreate(t *testing.T, e *env) createBody {
	t.Helper()
	posts := e.api.Calls(http.MethodPost, "/pods")
	if len(posts) == 0 {
		t.Fatal("no pod create was sent")
	}
	var b createBody
	if err := json.Unmarshal(posts[len(posts)-1].Body, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVolumeLimits(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	got := e.p.VolumeLimits()
	want := provider.VolumeLimits{Scope: provider.VolumeRegional, MinGB: 10, MaxGB: 4096, AttachAtCreate: true, MaxPerInstance: 1}
	if got != want {
		t.Fatalf("limits %+v, want %+v", got, want)
	}
}

// TestVolumeLifeAcrossAPod: a volume made once in an offer's data center,
// found again by a create sent twice, given to a pod in its create request
// at the mount path asked for, refused deletion while the pod mounts it,
// deleted once the pod is, and gone.
func TestVolumeLifeAcrossAPod(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, runpod.Config{})
	o := e.secureOffer(t, "US-TX-3")

	v, err := e.p.CreateVolume(ctx, volumeSpec("data", 100, o.Location))
	if err != nil {
		t.Fatal(err)
	}
	// The volume's location is the offer's: the core keeps only offers
	// whose region is the volume's.
	if v.ID == "" || v.Name != "data" || v.Location != o.Location || v.SizeGB != 100 || v.Status != provider.VolumeAvailable {
		t.Fatalf("created %+v", v)
	}
	posts := e.api.Calls(http.MethodPost, "/network-volumes")
	var in map[string]any
	if len(posts) != 1 || json.Unmarshal(posts[0].Body, &in) != nil ||
		in["name"] != runpod.VolumeName("data", installation) || in["size"] != 100.0 || in["dataCenter"] != "US-TX-3" || len(in) != 3 {
		t.Fatalf("create volume requests %+v", posts)
	}

	seen, err := e.p.ObserveVolume(ctx, o.Location, "data")
	if err != nil || seen == nil || seen.ID != v.ID || seen.Status != provider.VolumeAvailable || seen.Name != "data" {
		t.Fatalf("observe %+v %v", seen, err)
	}

	again, err := e.p.CreateVolume(ctx, volumeSpec("data", 100, o.Location))
	if err != nil || again.ID != v.ID {
		t.Fatalf("create sent again: %+v %v", again, err)
	}
	if n, vols := len(e.api.Calls(http.MethodPost, "/network-volumes")), e.api.Volumes(); n != 1 || len(vols) != 1 {
		t.Fatalf("a create sent twice made %d requests, %d volumes", n, len(vols))
	}

	s := spec("train")
	s.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/data"}}
	pod, err := e.p.Create(ctx, &o, nil, s)
	if err != nil {
		t.Fatal(err)
	}
	b := lastCreate(t, e)
	if b.Mounts == nil || len(b.Mounts.Network) != 1 || b.Mounts.Network[0].VolumeID != v.ID || b.Mounts.Network[0].Path != "/data" ||
		!slices.Equal(b.DataCenterIDs, []string{"US-TX-3"}) || b.Cloud != "SECURE" {
		t.Fatalf("create body %+v", b)
	}
	if pods := e.api.Pods(); len(pods) != 1 || pods[0].Volume != v.ID || pods[0].MountPath != "/data" || pods[0].DataCenter != "US-TX-3" {
		t.Fatalf("pods %+v", pods)
	}
	// A create sent again adopts the pod: one POST.
	if id, err := e.p.Create(ctx, &o, nil, s); err != nil || id != pod || len(e.api.Calls(http.MethodPost, "/pods")) != 1 {
		t.Fatalf("replay %q %v", id, err)
	}

	seen, err = e.p.ObserveVolume(ctx, o.Location, "data")
	if err != nil || seen == nil || seen.Status != provider.VolumeAttached || seen.AttachedTo != pod {
		t.Fatalf("observe attached %+v %v", seen, err)
	}

	err = e.p.DeleteVolume(ctx, o.Location, v.ID)
	kindOf(t, err, provider.InvalidRequest)
	if !errors.Is(err, provider.ErrInUse) || !strings.Contains(err.Error(), pod) {
		t.Fatalf("delete of a mounted volume: %v", err)
	}
	if n := len(e.api.Calls(http.MethodDelete, "/network-volumes")); n != 0 {
		t.Fatalf("%d deletes sent for a mounted volume", n)
	}
	kindOf(t, e.p.DetachVolume(ctx, o.Location, v.ID, pod), provider.InvalidRequest)

	if err := e.p.Delete(ctx, o.Location, "train", []string{pod}); err != nil {
		t.Fatal(err)
	}
	if err := e.p.DetachVolume(ctx, o.Location, v.ID, pod); err != nil { // the pod is gone: nothing to detach
		t.Fatal(err)
	}
	for range 2 { // deleted, then gone
		if err := e.p.DeleteVolume(ctx, o.Location, v.ID); err != nil {
			t.Fatal(err)
		}
	}
	if vols := e.api.Volumes(); len(vols) != 0 {
		t.Fatalf("volumes left %+v", vols)
	}
	if seen, err := e.p.ObserveVolume(ctx, o.Location, "data"); err != nil || seen != nil {
		t.Fatalf("observe after delete %+v %v", seen, err)
	}
}

// TestVolumeOfAnotherInstallationIsRefused: RunPod keeps no labels on a
// network volume, so its name carries the installation's mark
// (runpod.VolumeName): another installation's volume of the same name,
// mounted or not, is never observed nor adopted — this one's is made
// beside it. A volume of this installation's name mounted by a pod gpuprov
// did not make is refused; two of the name are ambiguous.
func TestVolumeOfAnotherInstallationIsRefused(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, runpod.Config{})
	o := e.secureOffer(t, "US-TX-3")
	other, err := runpod.New(runpod.Config{APIKey: apiKey}, runpod.WithInstallation("other"), runpod.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	spec2 := volumeSpec("data", 50, o.Location)
	spec2.Installation = "other"
	theirs, err := other.CreateVolume(ctx, spec2)
	if err != nil {
		t.Fatal(err)
	}
	if seen, err := e.p.ObserveVolume(ctx, o.Location, "data"); err != nil || seen != nil {
		t.Fatalf("another installation's unmounted volume observed: %+v %v", seen, err)
	}
	s := spec("theirs")
	s.Installation = "other"
	s.Volumes = []provider.VolumeMount{{ID: theirs.ID, Name: "data", MountPath: "/data"}}
	if _, err := other.Create(ctx, &o, nil, s); err != nil {
		t.Fatal(err)
	}
	mine, err := e.p.CreateVolume(ctx, volumeSpec("data", 50, o.Location))
	if err != nil || mine.ID == theirs.ID {
		t.Fatalf("this installation's volume data: %+v %v; want one of its own beside %s", mine, err, theirs.ID)
	}
	if n := len(e.api.Calls(http.MethodPost, "/network-volumes")); n != 2 {
		t.Fatalf("%d volume creates; want the other installation's and this one's", n)
	}
	if seen, err := e.p.ObserveVolume(ctx, o.Location, "data"); err != nil || seen == nil || seen.ID != mine.ID {
		t.Fatalf("observe: %+v %v, want %s", seen, err, mine.ID)
	}

	// A volume of this installation's name mounted by a pod gpuprov did
	// not make.
	vid := e.api.AddVolume(runpodmock.Volume{Name: runpod.VolumeName("scratch", installation), DataCenter: "US-TX-3", Size: 20})
	e.api.AddPod(runpodmock.Pod{Name: "notebook", GPU: "NVIDIA H100 80GB HBM3", Count: 1, Cloud: "SECURE", DataCenter: "US-TX-3",
		Image: "runpod/base", Volume: vid, MountPath: "/workspace"})
	_, err = e.p.CreateVolume(ctx, volumeSpec("scratch", 20, o.Location))
	kindOf(t, err, provider.InvalidRequest)
	if !strings.Contains(err.Error(), "not gpuprov's of installation "+installation) {
		t.Fatalf("error does not say why: %v", err)
	}

	// Unmounted, of this installation's name (a create whose answer was
	// lost): adopted.
	lone := e.api.AddVolume(runpodmock.Volume{Name: runpod.VolumeName("cache", installation), DataCenter: "US-TX-3", Size: 30})
	if v, err := e.p.CreateVolume(ctx, volumeSpec("cache", 30, o.Location)); err != nil || v.ID != lone {
		t.Fatalf("unmounted volume of the name: %+v %v", v, err)
	}
	// The same name in another data center is another volume.
	if v, err := e.p.CreateVolume(ctx, volumeSpec("cache", 30, provider.Location{Region: "EU-RO-1"})); err != nil || v.ID == lone ||
		v.Location.Region != "EU-RO-1" {
		t.Fatalf("volume in another data center: %+v %v", v, err)
	}
	// Two of the name that nothing tells apart.
	e.api.AddVolume(runpodmock.Volume{Name: runpod.VolumeName("cache", installation), DataCenter: "US-TX-3", Size: 30})
	_, err = e.p.ObserveVolume(ctx, o.Location, "cache")
	kindOf(t, err, provider.InvalidRequest)
}

// TestVolumeBadInputSendsNothing: input RunPod would refuse, or that the
// adapter cannot place, is InvalidRequest (Unavailable for a Community
// Cloud offer, which another offer may replace) before any request.
func TestVolumeBadInputSendsNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, runpod.Config{})
	secure := e.secureOffer(t, "US-TX-3")
	community := secure
	community.Detail = json.RawMessage(strings.Replace(string(secure.Detail), `"SECURE"`, `"COMMUNITY"`, 1))
	before := len(e.api.Calls("", ""))
	withVolumes := func(vs ...provider.VolumeMount) *provider.InstanceSpec { s := spec("train"); s.Volumes = vs; return s }
	one := provider.VolumeMount{ID: "vol0000001", Name: "data", MountPath: "/data"}
	for _, tc := range []struct {
		name string
		call func() error
		kind provider.ErrorKind
	}{
		{"size below 10 GB", func() error { _, err := e.p.CreateVolume(ctx, volumeSpec("data", 9, texas)); return err }, provider.InvalidRequest},
		{"size above 4096 GB", func() error { _, err := e.p.CreateVolume(ctx, volumeSpec("data", 4097, texas)); return err }, provider.InvalidRequest},
		{"no name", func() error { _, err := e.p.CreateVolume(ctx, volumeSpec("", 10, texas)); return err }, provider.InvalidRequest},
		{"no data center", func() error { _, err := e.p.CreateVolume(ctx, volumeSpec("data", 10, provider.Location{})); return err }, provider.InvalidRequest},
		{"observe without a data center", func() error { _, err := e.p.ObserveVolume(ctx, provider.Location{}, "data"); return err }, provider.InvalidRequest},
		{"attach", func() error { _, err := e.p.AttachVolume(ctx, texas, "vol0000001", "pod0000000001"); return err }, provider.InvalidRequest},
		{"delete without an id", func() error { return e.p.DeleteVolume(ctx, texas, "") }, provider.InvalidRequest},
		{"two volumes on a pod", func() error {
			_, err := e.p.Create(ctx, &secure, nil, withVolumes(one, provider.VolumeMount{ID: "vol0000002", Name: "more", MountPath: "/more"}))
			return err
		}, provider.InvalidRequest},
		{"relative mount path", func() error {
			_, err := e.p.Create(ctx, &secure, nil, withVolumes(provider.VolumeMount{ID: "vol0000001", Name: "data", MountPath: "data"}))
			return err
		}, provider.InvalidRequest},
		{"community cloud pod", func() error { _, err := e.p.Create(ctx, &community, nil, withVolumes(one)); return err }, provider.Unavailable},
		// The same, at plan time (provider.VolumeChecker): the core leaves
		// the offer out before the volume is made.
		{"community cloud offer at plan time", func() error { return e.p.CheckVolume(&community, "data", "/data") }, provider.Unavailable},
		{"relative mount path at plan time", func() error { return e.p.CheckVolume(&secure, "data", "data") }, provider.InvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kindOf(t, tc.call(), tc.kind)
			if calls := e.api.Calls("", ""); len(calls) != before {
				t.Fatalf("requests were sent: %+v", calls[before:])
			}
		})
	}
}

// A Secure Cloud offer with an absolute mount path passes the plan-time
// check.
func TestCheckVolumeAcceptsASecureOffer(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	secure := e.secureOffer(t, "US-TX-3")
	if err := e.p.CheckVolume(&secure, "data", "/data"); err != nil {
		t.Fatal(err)
	}
}

// TestVolumeAttachIsRefused: volumes attach at create; AttachVolume says
// so.
func TestVolumeAttachIsRefused(t *testing.T) {
	e := newEnv(t, runpod.Config{})
	_, err := e.p.AttachVolume(context.Background(), texas, "vol0000001", "pod0000000001")
	kindOf(t, err, provider.InvalidRequest)
	if !strings.Contains(err.Error(), "attach at create") {
		t.Fatalf("error does not say why: %v", err)
	}
}

// TestVolumePodMustBeInItsDataCenter: a volume in another data center than
// the offer's is refused before the pod create; a volume that is gone too.
func TestVolumePodMustBeInItsDataCenter(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, runpod.Config{})
	v, err := e.p.CreateVolume(ctx, volumeSpec("data", 10, provider.Location{Region: "EU-RO-1"}))
	if err != nil {
		t.Fatal(err)
	}
	o := e.secureOffer(t, "US-TX-3")
	s := spec("train")
	s.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/data"}}
	_, err = e.p.Create(ctx, &o, nil, s)
	kindOf(t, err, provider.InvalidRequest)
	s.Volumes[0].ID = "volgone"
	_, err = e.p.Create(ctx, &o, nil, s)
	kindOf(t, err, provider.InvalidRequest)
	if n := len(e.api.Calls(http.MethodPost, "/pods")); n != 0 {
		t.Fatalf("%d pod creates", n)
	}
}

// TestVolumeErrors: the answers the adapter maps for volumes (errors.go).
func TestVolumeErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("create", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			status int
			detail string
			kind   provider.ErrorKind
			scope  provider.Scope
		}{
			{"capacity", 400, runpodmock.CapacityDetail, provider.Capacity, provider.ScopeOffer},
			{"refused in the data center", 400, runpodmock.NoVolumesDetail, provider.Unavailable, provider.ScopeOffer},
			{"balance", 402, "Insufficient balance", provider.Quota, provider.ScopeProvider},
			{"key without access", 403, "access denied", provider.Credentials, provider.ScopeProvider},
			{"validation", 422, "Request validation failed.", provider.InvalidRequest, provider.ScopeOffer},
			{"throttled", 429, "rate limit exceeded", provider.Transient, provider.ScopeOffer},
			{"server", 503, "upstream", provider.Transient, provider.ScopeOffer},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, runpod.Config{})
				e.api.Fail(runpodmock.Fault{Method: http.MethodPost, Path: "/network-volumes", Status: tc.status, Detail: tc.detail, Times: 1})
				_, err := e.p.CreateVolume(ctx, volumeSpec("data", 10, texas))
				if pe := kindOf(t, err, tc.kind); pe.Scope() != tc.scope {
					t.Fatalf("scope %s", pe.Scope())
				}
				var ae *runpod.APIError
				if !errors.As(err, &ae) || ae.Status != tc.status {
					t.Fatalf("%v does not wrap the API error", err)
				}
			})
		}
	})
	t.Run("data center without network volumes", func(t *testing.T) {
		e := newEnv(t, runpod.Config{})
		e.api.SetVolumeTypes("US-CA-2")
		_, err := e.p.CreateVolume(ctx, volumeSpec("data", 10, provider.Location{Region: "US-CA-2"}))
		kindOf(t, err, provider.Unavailable)
		_, err = e.p.CreateVolume(ctx, volumeSpec("data", 10, provider.Location{Region: "XX-NO-1"})) // not in the catalog
		kindOf(t, err, provider.Unavailable)
		if n := len(e.api.Calls(http.MethodPost, "/network-volumes")); n != 0 {
			t.Fatalf("%d creates sent", n)
		}
	})
	t.Run("held by something not listed", func(t *testing.T) {
		e := newEnv(t, runpod.Config{})
		v, err := e.p.CreateVolume(ctx, volumeSpec("data", 10, texas))
		if err != nil {
			t.Fatal(err)
		}
		e.api.HoldVolume(v.ID, true) // a serverless worker, say
		err = e.p.DeleteVolume(ctx, texas, v.ID)
		kindOf(t, err, provider.InvalidRequest)
		var ae *runpod.APIError
		if !errors.Is(err, provider.ErrInUse) || !errors.As(err, &ae) || !strings.Contains(ae.Detail, "remove this network volume") {
			t.Fatalf("in use: %v", err)
		}
		e.api.HoldVolume(v.ID, false)
		if err := e.p.DeleteVolume(ctx, texas, v.ID); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("held by a terminated pod", func(t *testing.T) {
		e := newEnv(t, runpod.Config{})
		o := e.secureOffer(t, "US-TX-3")
		v, err := e.p.CreateVolume(ctx, volumeSpec("data", 10, o.Location))
		if err != nil {
			t.Fatal(err)
		}
		s := spec("train")
		s.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/data"}}
		pod, err := e.p.Create(ctx, &o, nil, s)
		if err != nil {
			t.Fatal(err)
		}
		e.api.SetStatus(pod, "TERMINATED") // being released: still listed, still holding
		err = e.p.DeleteVolume(ctx, o.Location, v.ID)
		kindOf(t, err, provider.Transient)
		if !errors.Is(err, provider.ErrInUse) {
			t.Fatalf("not ErrInUse: %v", err)
		}
		if seen, err := e.p.ObserveVolume(ctx, o.Location, "data"); err != nil || seen.Status != provider.VolumeAvailable {
			t.Fatalf("observe while released %+v %v", seen, err)
		}
	})
	t.Run("observe and delete", func(t *testing.T) {
		e := newEnv(t, runpod.Config{})
		e.api.Fail(runpodmock.Fault{Method: http.MethodGet, Path: "/network-volumes", Status: 401, Detail: "missing bearer token", Times: 1})
		_, err := e.p.ObserveVolume(ctx, texas, "data")
		kindOf(t, err, provider.Credentials)
		e.api.Fail(runpodmock.Fault{Method: http.MethodDelete, Path: "/network-volumes", Status: 500, Detail: "upstream", Times: 1})
		kindOf(t, e.p.DeleteVolume(ctx, texas, "vol0000001"), provider.Transient)
	})
}
