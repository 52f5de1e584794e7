package lambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/org/gpuprov/internal/openapitest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/lambda"
	"github.com/org/gpuprov/provider/lambda/lambdamock"
)

// Volumes are Lambda filesystems (volume.go). Every request and answer of
// these tests is checked against the OpenAPI document 1.8.3: the filesystem
// operations against testdata/openapi-filesystems.json, the launch against
// testdata/openapi.json (newEnv).

var east = provider.Location{Region: "us-east-1"} // the region of the first H100 offer

func volumeSpec(name string, loc provider.Location) provider.VolumeSpec {
	return provider.VolumeSpec{Name: name, Installation: installation, SizeGB: 500, Location: loc,
		UserLabels: map[string]string{"team": "ml"}, IdempotencyToken: "token-" + name}
}

// launchBody is what the adapter's last launch asked of Lambda's filesystems.
type launchBody struct {
	FileSystemNames  []string `json:"file_system_names"`
	FileSystemMounts []struct {
		MountPoint   string `json:"mount_point"`
		FileSystemID string `json:"file_system_id"`
	} `json:"file_system_mounts"`
}

func (e *env) lastLaunch(t *testing.T) launchBody {
	t.Helper()
	calls := e.api.Calls(http.MethodPost, "/instance-operations/launch")
	if len(calls) == 0 {
		t.Fatal("no launch was sent")
	}
	var b launchBody
	if err := json.Unmarshal(calls[len(calls)-1].Body, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVolumeLimitsAreLambdasFilesystems(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	var vm provider.VolumeManager = e.p
	got := vm.VolumeLimits()
	want := provider.VolumeLimits{Scope: provider.VolumeRegional, AttachAtCreate: true}
	if got != want {
		t.Fatalf("limits %+v, want %+v: regional, no size, attached by the launch at the path it names", got, want)
	}
}

// At plan time (provider.VolumeChecker) a mount path Lambda cannot mount
// at, or a name whose filesystem name would be too long, is refused before
// anything is sent; a path under /data passes.
func TestCheckVolumeAtPlanTime(t *testing.T) {
	e := newEnv(t, lambda.Config{})
	before := len(e.api.Calls("", ""))
	o := &provider.Offer{Provider: "lambda", Location: provider.Location{Region: "us-east-1"}}
	if err := e.p.CheckVolume(o, "data", "/data/train"); err != nil {
		t.Fatalf("a path under /data: %v", err)
	}
	for _, c := range []struct{ name, path string }{
		{"data", "/mnt/data"},
		{"data", "/home/ubuntu"},
		{strings.Repeat("a", 46), "/data"},
	} {
		if err := e.p.CheckVolume(o, c.name, c.path); provider.KindOf(err) != provider.InvalidRequest {
			t.Errorf("CheckVolume(%q, %q) = %v, want InvalidRequest", c.name, c.path, err)
		}
	}
	if calls := e.api.Calls("", ""); len(calls) != before {
		t.Fatalf("requests were sent: %+v", calls[before:])
	}
}

// TestVolumeLifecycle: a volume is made once (a create sent again finds it),
// launched with at its mount path, refused deletion while its instance
// lives (InvalidRequest) and while it terminates (Transient), both matching
// ErrInUse, then deleted; deleting it again succeeds and it is observed
// gone.
func TestVolumeLifecycle(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	fsName := lambda.FilesystemName("data", installation)

	v, err := e.p.CreateVolume(ctx, volumeSpec("data", east))
	if err != nil {
		t.Fatal(err)
	}
	if v.ID == "" || v.Name != "data" || v.Location != east || v.Status != provider.VolumeAvailable || v.AttachedTo != "" || v.SizeGB != 0 {
		t.Fatalf("created %+v", v)
	}
	posts := e.api.Calls(http.MethodPost, "/filesystems")
	var sent map[string]any
	if len(posts) != 1 || json.Unmarshal(posts[0].Body, &sent) != nil {
		t.Fatalf("creates %+v", posts)
	}
	if len(sent) != 2 || sent["name"] != fsName || sent["region"] != "us-east-1" {
		t.Fatalf("create body %s, want only the name %s and the region", posts[0].Body, fsName)
	}

	seen, err := e.p.ObserveVolume(ctx, east, "data")
	if err != nil || seen == nil || seen.ID != v.ID || seen.Status != provider.VolumeAvailable || seen.Name != "data" {
		t.Fatalf("observed %+v %v", seen, err)
	}
	if other, err := e.p.ObserveVolume(ctx, provider.Location{Region: "us-west-3"}, "data"); err != nil || other != nil {
		t.Fatalf("observed in another region: %+v %v", other, err)
	}

	// Sent again (its answer lost, say): the same filesystem, no second create.
	again, err := e.p.CreateVolume(ctx, volumeSpec("data", east))
	if err != nil || again.ID != v.ID {
		t.Fatalf("create sent again: %+v %v, want %s", again, err, v.ID)
	}
	if n, fss := len(e.api.Calls(http.MethodPost, "/filesystems")), e.api.Filesystems(); n != 1 || len(fss) != 1 {
		t.Fatalf("%d creates, filesystems %+v; want one", n, fss)
	}

	// The launch mounts it at the volume's path.
	s := spec("train")
	s.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/data/train"}}
	o, id := e.launch(t, s)
	b := e.lastLaunch(t)
	if !slices.Equal(b.FileSystemNames, []string{fsName}) || len(b.FileSystemMounts) != 1 ||
		b.FileSystemMounts[0].MountPoint != "/data/train" || b.FileSystemMounts[0].FileSystemID != v.ID {
		t.Fatalf("launch asked for %+v; want %s mounted at /data/train", b, fsName)
	}
	if ins := e.api.Instances(); len(ins) != 1 || !slices.Equal(ins[0].Mounts, []lambdamock.Mount{{ID: v.ID, Name: fsName, MountPoint: "/data/train"}}) {
		t.Fatalf("instances %+v", ins)
	}
	seen, err = e.p.ObserveVolume(ctx, east, "data")
	if err != nil || seen == nil || seen.Status != provider.VolumeAttached || seen.AttachedTo != id {
		t.Fatalf("observed while mounted: %+v %v, want attached to %s", seen, err, id)
	}

	// In use by a live instance: InvalidRequest, matching ErrInUse; nothing deleted.
	err = e.p.DeleteVolume(ctx, east, v.ID)
	kindOf(t, err, provider.InvalidRequest)
	if !errors.Is(err, provider.ErrInUse) || !strings.Contains(err.Error(), id) {
		t.Fatalf("delete while mounted: %v, want ErrInUse naming %s", err, id)
	}
	// Its instance terminating: Transient, matching ErrInUse.
	if err := e.p.Delete(ctx, o.Location, "train", []string{id}); err != nil {
		t.Fatal(err)
	}
	err = e.p.DeleteVolume(ctx, east, v.ID)
	kindOf(t, err, provider.Transient)
	if !errors.Is(err, provider.ErrInUse) {
		t.Fatalf("delete while the instance terminates: %v, want ErrInUse", err)
	}
	if n := len(e.api.Calls(http.MethodDelete, "/filesystems/")); n != 0 {
		t.Fatalf("%d deletes sent while Lambda listed the filesystem in use", n)
	}

	// The instance gone (the mock ends a termination once listed): deleted.
	if err := e.p.DeleteVolume(ctx, east, v.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if fss := e.api.Filesystems(); len(fss) != 0 {
		t.Fatalf("filesystems left %+v", fss)
	}
	if err := e.p.DeleteVolume(ctx, east, v.ID); err != nil {
		t.Fatalf("delete of a volume that is gone: %v", err)
	}
	if n := len(e.api.Calls(http.MethodDelete, "/filesystems/")); n != 1 {
		t.Fatalf("%d deletes sent, want 1", n)
	}
	if seen, err := e.p.ObserveVolume(ctx, east, "data"); err != nil || seen != nil {
		t.Fatalf("observed after delete: %+v %v", seen, err)
	}
}

// TestVolumeOfAnotherInstallationIsNeverOurs: filesystems carry no labels,
// so the installation is in the name. Another installation's volume of the
// same name is another filesystem: not observed, not adopted, and refused
// deletion; so is a filesystem gpuprov did not make, even one with
// gpuprov's bare volume name. A filesystem of this installation's name that
// an instance gpuprov did not launch mounts is not adopted.
func TestVolumeOfAnotherInstallationIsNeverOurs(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	other, err := lambda.New(lambda.Config{APIKey: apiKey}, lambda.WithInstallation("inst-other"), lambda.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.CreateVolume(ctx, provider.VolumeSpec{Name: "data", Installation: "inst-other", Location: east})
	if err != nil {
		t.Fatal(err)
	}
	if seen, err := e.p.ObserveVolume(ctx, east, "data"); err != nil || seen != nil {
		t.Fatalf("another installation's volume observed as ours: %+v %v", seen, err)
	}
	ours, err := e.p.CreateVolume(ctx, volumeSpec("data", east))
	if err != nil || ours.ID == theirs.ID {
		t.Fatalf("created %+v %v; want a filesystem of our own, not %s", ours, err, theirs.ID)
	}
	users := e.api.AddFilesystem(provider.VolumeResourceName("data"), "us-east-1")
	for _, id := range []string{theirs.ID, users} {
		kindOf(t, e.p.DeleteVolume(ctx, east, id), provider.InvalidRequest)
	}
	if n, fss := len(e.api.Calls(http.MethodDelete, "/filesystems/")), e.api.Filesystems(); n != 0 || len(fss) != 3 {
		t.Fatalf("%d deletes sent, filesystems %+v; want none deleted", n, fss)
	}

	// A filesystem of our name that someone else's instance mounts.
	logs := e.api.AddFilesystem(lambda.FilesystemName("logs", installation), "us-east-1")
	o := e.offer(t)
	if _, err := e.p.Prepare(ctx, &o, spec("key")); err != nil {
		t.Fatal(err)
	}
	launch := `{"region_name":"us-east-1","instance_type_name":"gpu_1x_h100_pcie","ssh_key_names":["` +
		lambda.SideName("key", installation) + `"],"name":"someone-else","file_system_names":["` + lambda.FilesystemName("logs", installation) + `"]}`
	resp, err := e.RT.RoundTrip(e.Request(t, http.MethodPost, base+"/instance-operations/launch", launch))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a launch outside gpuprov: %v %v", resp, err)
	}
	resp.Body.Close()
	_, err = e.p.CreateVolume(ctx, volumeSpec("logs", east))
	if pe := kindOf(t, err, provider.InvalidRequest); !strings.Contains(pe.Error(), logs) {
		t.Fatalf("adopted a filesystem mounted outside gpuprov: %v", err)
	}
}

// TestVolumeCreateRace: Lambda has no idempotency token. A create that
// another process's create beat (400 global/duplicate) adopts the
// filesystem when it is in the region, and is InvalidRequest when the name
// is the account's in another region.
func TestVolumeCreateRace(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{})
	racer := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/filesystems") {
			body, err := r.GetBody()
			if err != nil {
				return nil, err
			}
			first, err := http.NewRequest(http.MethodPost, r.URL.String(), body)
			if err != nil {
				return nil, err
			}
			first.Header = r.Header.Clone()
			resp, err := e.RT.RoundTrip(first) // the other process's create lands first
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
		}
		return e.RT.RoundTrip(r)
	})}
	p, err := lambda.New(lambda.Config{APIKey: apiKey}, lambda.WithInstallation(installation), lambda.WithHTTP(base, racer))
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.CreateVolume(ctx, volumeSpec("data", east))
	if err != nil {
		t.Fatalf("create beaten by another: %v", err)
	}
	if fss := e.api.Filesystems(); len(fss) != 1 || fss[0].ID != v.ID || len(e.api.Calls(http.MethodPost, "/filesystems")) != 2 {
		t.Fatalf("filesystems %+v, volume %+v", fss, v)
	}

	if _, err := e.p.CreateVolume(ctx, volumeSpec("west", provider.Location{Region: "us-west-3"})); err != nil {
		t.Fatal(err)
	}
	_, err = e.p.CreateVolume(ctx, volumeSpec("west", east))
	kindOf(t, err, provider.InvalidRequest)
	if !lambda.IsAPIError(err, lambda.CodeDuplicate) || !strings.Contains(err.Error(), "us-west-3") {
		t.Fatalf("a name the account has in another region: %v", err)
	}
}

// TestVolumeBadInputSendsNothing: what Lambda would refuse, or what gpuprov
// must not send, is InvalidRequest before any request.
func TestVolumeBadInputSendsNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	o := e.offer(t)
	prep, err := e.p.Prepare(ctx, &o, spec("train"))
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := lambda.New(lambda.Config{APIKey: apiKey}, lambda.WithHTTP(base, e.Client()))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 46) // gpuprov--<46>-<5>: 61 characters
	withMount := func(id, path string) func() error {
		return func() error {
			s := spec("train")
			s.Volumes = []provider.VolumeMount{{ID: id, Name: "data", MountPath: path}}
			_, err := e.p.Create(ctx, &o, prep, s)
			return err
		}
	}
	create := func(s provider.VolumeSpec) func() error {
		return func() error { _, err := e.p.CreateVolume(ctx, s); return err }
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"no name", create(volumeSpec("", east))},
		{"a name of 46 characters", create(volumeSpec(long, east))},
		{"no region", create(volumeSpec("data", provider.Location{}))},
		{"another installation", create(provider.VolumeSpec{Name: "data", Installation: "inst-other", Location: east})},
		{"no installation", func() error {
			_, err := unbound.CreateVolume(ctx, provider.VolumeSpec{Name: "data", Location: east})
			return err
		}},
		{"observe without a region", func() error { _, err := e.p.ObserveVolume(ctx, provider.Location{}, "data"); return err }},
		{"observe a name of 46 characters", func() error { _, err := e.p.ObserveVolume(ctx, east, long); return err }},
		{"attach", func() error { _, err := e.p.AttachVolume(ctx, east, "fs1", "i-1"); return err }},
		{"detach without an instance", func() error { return e.p.DetachVolume(ctx, east, "fs1", "") }},
		{"delete without an id", func() error { return e.p.DeleteVolume(ctx, east, "") }},
		{"mounted outside /home, /lambda/nfs and /data", withMount("fs1", "/mnt/data")},
		{"mounted at a path with _", withMount("fs1", "/data/my_set")},
		{"mounted at a path with .", withMount("fs1", "/data/v1.2")},
		{"mounted over /home", withMount("fs1", "/home")},
		{"mounted over the login user's home", withMount("fs1", "/home/ubuntu")},
		{"mounted at 257 characters", withMount("fs1", "/data/"+strings.Repeat("x", 251))},
		{"a volume without an id", withMount("", "/data")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.api.Calls("", ""))
			kindOf(t, tc.call(), provider.InvalidRequest)
			if after := len(e.api.Calls("", "")); after != before {
				t.Fatalf("%d requests sent", after-before)
			}
		})
	}
	// The longest name that fits is made; a mount at the longest path is sent.
	if _, err := e.p.CreateVolume(ctx, volumeSpec(long[:45], east)); err != nil {
		t.Fatalf("a name of 45 characters: %v", err)
	}
	v, err := e.p.CreateVolume(ctx, volumeSpec("data", east))
	if err != nil {
		t.Fatal(err)
	}
	if err := withMount(v.ID, "/data/"+strings.Repeat("x", 250))(); err != nil {
		t.Fatalf("a mount path of 256 characters: %v", err)
	}
}

// TestVolumeErrorsMapToKinds: the documented answers of the filesystem
// operations, and of a launch with a volume, as the core sees them.
func TestVolumeErrorsMapToKinds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		fault lambdamock.Fault
		call  func(t *testing.T, e *env) error
		kind  provider.ErrorKind
		scope provider.Scope
		code  string
	}{
		{"filesystem quota", lambdamock.Fault{Method: http.MethodPost, Path: "/filesystems", Status: 400, Code: lambda.CodeQuotaExceeded, Message: "Quota exceeded."},
			createData, provider.Quota, provider.ScopeOffer, lambda.CodeQuotaExceeded},
		// 1.8.3 documents no capacity code for filesystems: an upstream
		// provider's exhaustion (a provider/ code, with a status the
		// document lists nowhere) is Capacity.
		{"upstream exhaustion", lambdamock.Fault{Method: http.MethodPost, Path: "/filesystems", Status: 503, Code: lambda.CodeProviderQuota, Message: "exhausted"},
			createData, provider.Capacity, provider.ScopeOffer, lambda.CodeProviderQuota},
		{"invalid parameters", lambdamock.Fault{Method: http.MethodPost, Path: "/filesystems", Status: 400, Code: lambda.CodeInvalidParameters, Message: "Invalid request data."},
			createData, provider.InvalidRequest, provider.ScopeOffer, lambda.CodeInvalidParameters},
		{"a bad key", lambdamock.Fault{Method: http.MethodGet, Path: "/file-systems", Status: 401, Code: lambda.CodeInvalidAPIKey, Message: "API key was invalid, expired, or deleted."},
			createData, provider.Credentials, provider.ScopeProvider, lambda.CodeInvalidAPIKey},
		{"an inactive account", lambdamock.Fault{Method: http.MethodPost, Path: "/filesystems", Status: 403, Code: lambda.CodeAccountInactive, Message: "inactive"},
			createData, provider.Credentials, provider.ScopeProvider, lambda.CodeAccountInactive},
		{"a listing that fails", lambdamock.Fault{Method: http.MethodGet, Path: "/file-systems", Status: 502, Message: "bad gateway"},
			func(_ *testing.T, e *env) error { _, err := e.p.ObserveVolume(ctx, east, "data"); return err }, provider.Transient, provider.ScopeOffer, ""},
		// Lambda refuses the delete though its listing showed no instance
		// (one launched between the two): ErrInUse, Transient while no
		// listing shows the instance.
		{"filesystem in use", lambdamock.Fault{Method: http.MethodDelete, Path: "/filesystems/", Status: 400, Code: lambda.CodeFilesystemInUse, Message: "in use"},
			deleteData, provider.Transient, provider.ScopeOffer, lambda.CodeFilesystemInUse},
		{"launch out of capacity", lambdamock.Fault{Method: http.MethodPost, Path: "/instance-operations/launch", Status: 400, Code: lambda.CodeInsufficientCapacity, Message: "Not enough capacity to fulfill launch request."},
			func(t *testing.T, e *env) error { return launchWith(t, e, east) }, provider.Capacity, provider.ScopeOffer, lambda.CodeInsufficientCapacity},
		{"launch quota", lambdamock.Fault{Method: http.MethodPost, Path: "/instance-operations/launch", Status: 400, Code: lambda.CodeQuotaExceeded, Message: "Quota exceeded."},
			func(t *testing.T, e *env) error { return launchWith(t, e, east) }, provider.Quota, provider.ScopeOffer, lambda.CodeQuotaExceeded},
		// The mock's own answer: the volume is in another region than the launch.
		{"launch with a volume of another region", lambdamock.Fault{},
			func(t *testing.T, e *env) error { return launchWith(t, e, provider.Location{Region: "us-west-3"}) }, provider.Unavailable, provider.ScopeOffer, lambda.CodeFileSystemWrongRegion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, lambda.Config{LaunchInterval: 1})
			if tc.fault.Status != 0 {
				tc.fault.Times = 1
				e.api.Fail(tc.fault)
			}
			err := tc.call(t, e)
			pe := kindOf(t, err, tc.kind)
			if pe.Scope() != tc.scope {
				t.Fatalf("blocks %s, want %s: %v", pe.Scope(), tc.scope, err)
			}
			if tc.code != "" && !lambda.IsAPIError(err, tc.code) {
				t.Fatalf("%v does not wrap Lambda's %s", err, tc.code)
			}
			if tc.code == lambda.CodeFilesystemInUse && !errors.Is(err, provider.ErrInUse) {
				t.Fatalf("%v does not match ErrInUse", err)
			}
		})
	}

	// A delete answered 404 (another process deleted it after the listing):
	// gone, success.
	e := newEnv(t, lambda.Config{})
	e.api.Fail(lambdamock.Fault{Method: http.MethodDelete, Path: "/filesystems/", Status: 404, Code: lambda.CodeObjectDoesNotExist, Message: "Filesystem was not found.", Times: 1})
	if err := deleteData(t, e); err != nil {
		t.Fatalf("delete answered 404: %v", err)
	}
}

func createData(_ *testing.T, e *env) error {
	_, err := e.p.CreateVolume(context.Background(), volumeSpec("data", east))
	return err
}

// deleteData makes volume data, then deletes it.
func deleteData(_ *testing.T, e *env) error {
	v, err := e.p.CreateVolume(context.Background(), volumeSpec("data", east))
	if err != nil {
		return err
	}
	return e.p.DeleteVolume(context.Background(), east, v.ID)
}

// launchWith makes volume data in loc, then launches a VM with it on the
// first H100 offer (us-east-1).
func launchWith(t *testing.T, e *env, loc provider.Location) error {
	ctx := context.Background()
	v, err := e.p.CreateVolume(ctx, volumeSpec("data", loc))
	if err != nil {
		return err
	}
	o := e.offer(t)
	s := spec("train")
	s.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/data"}}
	prep, err := e.p.Prepare(ctx, &o, s)
	if err != nil {
		return err
	}
	_, err = e.p.Create(ctx, &o, prep, s)
	return err
}

// TestDetachVolumeOnlyOfWhatIsNotMounted: no operation takes a filesystem
// off an instance. A detach of a volume the instance does not mount
// succeeds; of one it mounts, InvalidRequest (the instance's end releases
// it).
func TestDetachVolumeOnlyOfWhatIsNotMounted(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	v, err := e.p.CreateVolume(ctx, volumeSpec("data", east))
	if err != nil {
		t.Fatal(err)
	}
	spare, err := e.p.CreateVolume(ctx, volumeSpec("spare", east))
	if err != nil {
		t.Fatal(err)
	}
	s := spec("train")
	s.Volumes = []provider.VolumeMount{{ID: v.ID, Name: "data", MountPath: "/lambda/nfs/data"}}
	o, id := e.launch(t, s)
	kindOf(t, e.p.DetachVolume(ctx, east, v.ID, id), provider.InvalidRequest)
	if err := e.p.DetachVolume(ctx, east, spare.ID, id); err != nil {
		t.Fatalf("detach of a volume the instance does not mount: %v", err)
	}
	if err := e.p.DetachVolume(ctx, east, v.ID, e.p.UnknownID()); err != nil {
		t.Fatalf("detach from an instance that is gone: %v", err)
	}
	if err := e.p.Delete(ctx, o.Location, "train", []string{id}); err != nil {
		t.Fatal(err)
	}
	e.api.Settle()
	if err := e.p.DetachVolume(ctx, east, v.ID, id); err != nil {
		t.Fatalf("detach once the instance is gone: %v", err)
	}
}

// TestVolumeOperationsAgainstTheVendorSchema: every filesystem operation of
// the trimmed document is exercised, with the error answers the adapter
// branches on, and the document rejects a mock or an adapter that strays.
func TestVolumeOperationsAgainstTheVendorSchema(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, lambda.Config{LaunchInterval: 1})
	if err := deleteData(t, e); err != nil { // list, create 200, list, delete 200
		t.Fatal(err)
	}
	e.api.Fail(lambdamock.Fault{Method: http.MethodDelete, Path: "/filesystems/", Status: 404, Code: lambda.CodeObjectDoesNotExist, Message: "Filesystem was not found.", Times: 1})
	e.api.Fail(lambdamock.Fault{Method: http.MethodDelete, Path: "/filesystems/", Status: 400, Code: lambda.CodeFilesystemInUse, Message: "in use", Times: 1})
	v, err := e.p.CreateVolume(ctx, volumeSpec("data", east))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.DeleteVolume(ctx, east, v.ID); err != nil { // 404
		t.Fatal(err)
	}
	if err := e.p.DeleteVolume(ctx, east, v.ID); !errors.Is(err, provider.ErrInUse) { // 400
		t.Fatalf("in use: %v", err)
	}
	e.api.Fail(lambdamock.Fault{Method: http.MethodPost, Path: "/filesystems", Status: 400, Code: lambda.CodeQuotaExceeded, Message: "Quota exceeded.", Times: 1})
	if _, err := e.p.CreateVolume(ctx, volumeSpec("more", east)); provider.KindOf(err) != provider.Quota { // 400
		t.Fatalf("quota: %v", err)
	}
	if left := e.fsDoc.Unexercised(); len(left) > 0 {
		t.Errorf("filesystem operations no test exercised: %v", left)
	}
	for _, want := range []string{"POST /api/v1/filesystems 400", "DELETE /api/v1/filesystems/{id} 400", "DELETE /api/v1/filesystems/{id} 404"} {
		if !slices.Contains(e.fsDoc.Seen(), want) {
			t.Errorf("no %s answer was checked; seen %v", want, e.fsDoc.Seen())
		}
	}

	list := e.Request(t, http.MethodGet, base+"/file-systems", "")
	answer := e.Answer(t, list)
	if err := e.fsDoc.CheckResponse(list, openapitest.JSONResponse(200, answer)); err != nil {
		t.Fatalf("the mock's own listing is rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"a filesystem without is_in_use", func() error {
			return e.fsDoc.CheckResponse(list, openapitest.JSONResponse(200, openapitest.Edit(t, answer, func(o map[string]any) {
				delete(o["data"].([]any)[0].(map[string]any), "is_in_use")
			})))
		}, "is_in_use"},
		{"a filesystem name with _", func() error {
			_, err := e.fsDoc.CheckRequest(e.Request(t, http.MethodPost, base+"/filesystems", `{"name":"gpuprov--my_data","region":"us-east-1"}`))
			return err
		}, "name"},
		{"a filesystem name of 61 characters", func() error {
			_, err := e.fsDoc.CheckRequest(e.Request(t, http.MethodPost, base+"/filesystems", `{"name":"`+strings.Repeat("a", 61)+`","region":"us-east-1"}`))
			return err
		}, "name"},
		{"a delete refused with a code it does not document", func() error {
			del := e.Request(t, http.MethodDelete, base+"/filesystems/"+v.ID, "")
			return e.fsDoc.CheckResponse(del, openapitest.JSONResponse(400,
				[]byte(`{"error":{"code":"global/invalid-parameters","message":"m","suggestion":"s"}}`)))
		}, "code"},
		{"a launch mounting outside /home, /lambda/nfs and /data", func() error {
			_, err := e.Doc.CheckRequest(e.Request(t, http.MethodPost, base+"/instance-operations/launch",
				`{"region_name":"us-east-1","instance_type_name":"gpu_1x_h100_pcie","ssh_key_names":["k"],"file_system_mounts":[{"mount_point":"/mnt/data","file_system_id":"x"}]}`))
			return err
		}, "mount_point"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the schema check let it through (or named the wrong field): %v", err)
			}
		})
	}
}
