package simserver

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// volumeCall sends one volume API call to cloud c1 and returns the status,
// the Volume answered (if any) and the error code (if any).
func volumeCall(t *testing.T, s *Server, method, path string, in any) (int, Volume, string) {
	t.Helper()
	var out struct {
		Volume
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	resp := request(t, s, method, "/clouds/c1/v1/"+path, s.APIKey("c1"), in, &out)
	if out.Error.Code != "" {
		t.Logf("%s %s: %d %s: %s", method, path, resp.StatusCode, out.Error.Code, out.Error.Message)
	}
	return resp.StatusCode, out.Volume, out.Error.Code
}

// createIn creates an instance of offer in c1.
func createIn(t *testing.T, s *Server, offer string) Instance {
	t.Helper()
	var in Instance
	if resp := request(t, s, "POST", "/clouds/c1/v1/instances", s.APIKey("c1"), map[string]any{"offer_id": offer, "name": "vm"}, &in); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create %s: %d", offer, resp.StatusCode)
	}
	return in
}

func volumeBody(name, token string, size int) map[string]any {
	return map[string]any{"name": name, "zone": "eu-west-1b", "size_gb": size, "labels": map[string]string{"gpuprov": name, "team": "a"},
		"idempotency_token": token}
}

// TestVolumeCreateListGet: a create is "creating" for volume_time, then
// "available"; a create sent again with its token answers the same
// volume, another token with the name taken is a conflict, and sizes and
// zones outside the cloud's are invalid requests. Listings filter on
// labels and zone, as instance listings do.
func TestVolumeCreateListGet(t *testing.T) {
	s, clk := start(t, func(o *Options) { o.Clouds[0].Timing.VolumeTime = Duration(2 * time.Second) })
	st, v, _ := volumeCall(t, s, "POST", "volumes", volumeBody("data", "tok-1", 100))
	if st != http.StatusCreated || v.Status != VolumeCreating || v.Region != "eu-west" || v.Zone != "eu-west-1b" || v.SizeGB != 100 ||
		!strings.HasPrefix(v.ID, "vol-") || v.Labels["team"] != "a" {
		t.Fatalf("create: %d %+v", st, v)
	}
	if st, again, _ := volumeCall(t, s, "POST", "volumes", volumeBody("data", "tok-1", 100)); st != http.StatusOK || again.ID != v.ID {
		t.Errorf("replay with the same token: %d %s, want 200 and %s", st, again.ID, v.ID)
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		st   int
		code string
	}{
		{"name taken, another token", volumeBody("data", "tok-2", 100), http.StatusConflict, CodeConflict},
		{"name taken, no token", volumeBody("data", "", 100), http.StatusConflict, CodeConflict},
		{"size 0", volumeBody("small", "tok-3", 0), http.StatusBadRequest, CodeInvalidRequest},
		{"size over 16384", volumeBody("big", "tok-4", 16385), http.StatusBadRequest, CodeInvalidRequest},
		{"unknown zone", map[string]any{"name": "z", "zone": "mars-1a", "size_gb": 10}, http.StatusBadRequest, CodeInvalidRequest},
		{"unknown field", map[string]any{"name": "z", "zone": "eu-west-1b", "size_gb": 10, "iops": 3}, http.StatusBadRequest, CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, _, code := volumeCall(t, s, "POST", "volumes", tc.body); st != tc.st || code != tc.code {
				t.Errorf("got %d %s, want %d %s", st, code, tc.st, tc.code)
			}
		})
	}
	if st, _, _ := volumeCall(t, s, "POST", "volumes", volumeBody("max", "tok-5", 16384)); st != http.StatusCreated {
		t.Errorf("size 16384: %d, want 201", st)
	}
	other := map[string]any{"name": "data", "zone": "us-east-1a", "size_gb": 1, "labels": map[string]string{"gpuprov": "other"}}
	if st, _, _ := volumeCall(t, s, "POST", "volumes", other); st != http.StatusCreated {
		t.Errorf("the same name in another zone: %d, want 201", st)
	}

	clk.Advance(2 * time.Second)
	if st, got, _ := volumeCall(t, s, "GET", "volumes/"+v.ID, nil); st != http.StatusOK || got.Status != VolumeAvailable {
		t.Errorf("after volume_time: %d %+v, want available", st, got)
	}
	if st, _, code := volumeCall(t, s, "GET", "volumes/vol-nope", nil); st != http.StatusNotFound || code != CodeNotFound {
		t.Errorf("unknown volume: %d %s", st, code)
	}
	var list struct{ Volumes []Volume }
	request(t, s, "GET", "/clouds/c1/v1/volumes?label=gpuprov=data&label=team=a", s.APIKey("c1"), nil, &list)
	if len(list.Volumes) != 1 || list.Volumes[0].ID != v.ID {
		t.Errorf("label filter: %+v, want %s only", list.Volumes, v.ID)
	}
	request(t, s, "GET", "/clouds/c1/v1/volumes?zone=us-east-1a", s.APIKey("c1"), nil, &list)
	if len(list.Volumes) != 1 || list.Volumes[0].Labels["gpuprov"] != "other" {
		t.Errorf("zone filter: %+v", list.Volumes)
	}
	request(t, s, "GET", "/clouds/c1/v1/volumes", s.APIKey("c1"), nil, &list)
	if len(list.Volumes) != 3 || list.Volumes[0].ID > list.Volumes[1].ID {
		t.Errorf("all volumes, by id: %+v", list.Volumes)
	}
	if resp := request(t, s, "GET", "/clouds/c1/v1/volumes", "wrong", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong key: %d", resp.StatusCode)
	}
	var admin struct{ Volumes []Volume }
	if resp := request(t, s, "GET", "/admin/clouds/c1/volumes", s.AdminToken(), nil, &admin); resp.StatusCode != http.StatusOK || len(admin.Volumes) != 3 {
		t.Errorf("admin volumes: %d %+v", resp.StatusCode, admin.Volumes)
	}
}

// TestVolumeAttachDetachDelete: the rules of attach (a running instance of
// the volume's zone, one instance at a time, idempotent), detach and
// delete (refused while attached; gone is 404).
func TestVolumeAttachDetachDelete(t *testing.T) {
	s, clk := start(t, nil)
	_, v, _ := volumeCall(t, s, "POST", "volumes", volumeBody("data", "tok-1", 10))
	a, b, east := createIn(t, s, "a-t4x1-euw1b"), createIn(t, s, "a-t4x1-euw1b"), createIn(t, s, "a-l4x1-use1a")
	attach := func(vol, id string) (int, Volume, string) {
		return volumeCall(t, s, "POST", "volumes/"+vol+"/attach", map[string]string{"instance_id": id})
	}
	if st, _, code := attach(v.ID, a.ID); st != http.StatusBadRequest || code != CodeInvalidRequest {
		t.Errorf("attach to a provisioning instance: %d %s, want 400", st, code)
	}
	clk.Advance(4 * time.Second)

	var msg struct{ Error struct{ Message string } }
	request(t, s, "POST", "/clouds/c1/v1/volumes/"+v.ID+"/attach", s.APIKey("c1"), map[string]string{"instance_id": east.ID}, &msg)
	if !strings.Contains(msg.Error.Message, "eu-west-1b") || !strings.Contains(msg.Error.Message, "us-east-1a") {
		t.Errorf("zone mismatch: %q, want both zones named", msg.Error.Message)
	}
	if st, _, _ := attach(v.ID, "i-nope"); st != http.StatusBadRequest {
		t.Errorf("attach to an unknown instance: %d, want 400", st)
	}
	if st, _, _ := attach("vol-nope", a.ID); st != http.StatusNotFound {
		t.Errorf("attach an unknown volume: %d, want 404", st)
	}

	st, got, _ := attach(v.ID, a.ID)
	if st != http.StatusOK || got.Status != VolumeAttached || got.AttachedTo != a.ID || got.Device == "" {
		t.Fatalf("attach: %d %+v", st, got)
	}
	if st, again, _ := attach(v.ID, a.ID); st != http.StatusOK || again.Device != got.Device {
		t.Errorf("attach again to the same instance: %d %+v, want 200 and the same device", st, again)
	}
	if st, _, code := attach(v.ID, b.ID); st != http.StatusConflict || code != CodeVolumeInUse {
		t.Errorf("attach to another instance: %d %s, want 409 volume_in_use", st, code)
	}
	if st, _, code := volumeCall(t, s, "DELETE", "volumes/"+v.ID, nil); st != http.StatusConflict || code != CodeVolumeInUse {
		t.Errorf("delete an attached volume: %d %s, want 409 volume_in_use", st, code)
	}
	if st, _, code := volumeCall(t, s, "POST", "volumes/"+v.ID+"/detach", map[string]string{"instance_id": b.ID}); st != http.StatusConflict || code != CodeVolumeInUse {
		t.Errorf("detach from an instance it is not attached to: %d %s, want 409 volume_in_use", st, code)
	}
	for range 2 { // the second is a no-op
		if st, got, _ := volumeCall(t, s, "POST", "volumes/"+v.ID+"/detach", map[string]string{"instance_id": a.ID}); st != http.StatusOK ||
			got.Status != VolumeAvailable || got.AttachedTo != "" || got.Device != "" {
			t.Errorf("detach: %d %+v", st, got)
		}
	}
	if st, got, _ := attach(v.ID, b.ID); st != http.StatusOK || got.AttachedTo != b.ID {
		t.Errorf("attach to b once detached from a: %d %+v", st, got)
	}
	volumeCall(t, s, "POST", "volumes/"+v.ID+"/detach", map[string]string{"instance_id": b.ID})
	if st, _, _ := volumeCall(t, s, "DELETE", "volumes/"+v.ID, nil); st != http.StatusNoContent {
		t.Errorf("delete: %d, want 204", st)
	}
	if st, _, code := volumeCall(t, s, "DELETE", "volumes/"+v.ID, nil); st != http.StatusNotFound || code != CodeNotFound {
		t.Errorf("delete again: %d %s, want 404", st, code)
	}
	if _, err := os.Stat(s.VolumeDir("c1", v.ID)); !os.IsNotExist(err) {
		t.Errorf("the deleted volume's data is still there: %v", err)
	}
	if st, again, _ := volumeCall(t, s, "POST", "volumes", volumeBody("data", "tok-1", 10)); st != http.StatusCreated || again.ID == v.ID {
		t.Errorf("create after delete: %d %s, want a new volume", st, again.ID)
	}
}

// TestVolumeStaysWhenItsInstanceIsDeleted: a volume is attached to its
// instance until that has terminated (attach elsewhere meanwhile: 409
// conflict, a retry), then it is available and attaches to another; a
// preempted instance detaches its volume too.
func TestVolumeStaysWhenItsInstanceIsDeleted(t *testing.T) {
	s, clk := start(t, nil)
	_, v, _ := volumeCall(t, s, "POST", "volumes", volumeBody("data", "tok-1", 10))
	a, b := createIn(t, s, "a-t4x1-euw1b"), createIn(t, s, "a-t4x1-euw1b")
	clk.Advance(4 * time.Second)
	volumeCall(t, s, "POST", "volumes/"+v.ID+"/attach", map[string]string{"instance_id": a.ID})
	request(t, s, "DELETE", "/clouds/c1/v1/instances/"+a.ID, s.APIKey("c1"), nil, nil)
	if st, _, code := volumeCall(t, s, "POST", "volumes/"+v.ID+"/attach", map[string]string{"instance_id": b.ID}); st != http.StatusConflict || code != CodeConflict {
		t.Errorf("attach while its instance stops: %d %s, want 409 conflict", st, code)
	}
	if st, _, code := volumeCall(t, s, "DELETE", "volumes/"+v.ID, nil); st != http.StatusConflict || code != CodeConflict {
		t.Errorf("delete while its instance stops: %d %s, want 409 conflict", st, code)
	}
	clk.Advance(time.Second)
	if _, got, _ := volumeCall(t, s, "GET", "volumes/"+v.ID, nil); got.Status != VolumeAvailable || got.AttachedTo != "" {
		t.Fatalf("after its instance terminated: %+v, want available", got)
	}
	if st, got, _ := volumeCall(t, s, "POST", "volumes/"+v.ID+"/attach", map[string]string{"instance_id": b.ID}); st != http.StatusOK || got.AttachedTo != b.ID {
		t.Fatalf("attach to b: %d %+v", st, got)
	}
	if err := s.Preempt("c1", b.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	vols, err := s.Volumes("c1")
	if err != nil || len(vols) != 1 || vols[0].Status != VolumeAvailable {
		t.Errorf("after a preemption: %+v, %v; want the volume available", vols, err)
	}
}

// TestVolumeStockoutZones: volume_stockout_zones refuses creates there
// with out_of_capacity, and only there.
func TestVolumeStockoutZones(t *testing.T) {
	s, _ := start(t, func(o *Options) { o.Clouds[0].Faults.VolumeStockoutZones = []string{"eu-west-1b"} })
	if st, _, code := volumeCall(t, s, "POST", "volumes", volumeBody("data", "tok-1", 10)); st != http.StatusConflict || code != CodeOutOfCapacity {
		t.Errorf("create in a stocked-out zone: %d %s", st, code)
	}
	if st, _, _ := volumeCall(t, s, "POST", "volumes", map[string]any{"name": "d", "zone": "us-east-1a", "size_gb": 1}); st != http.StatusCreated {
		t.Errorf("create elsewhere: %d", st)
	}
}

// TestVolumesSurviveARestart: volumes, their attachments, tokens and ids
// are in the state file; a restarted server answers them as before.
func TestVolumesSurviveARestart(t *testing.T) {
	stateFile, stateDir := filepath.Join(t.TempDir(), "state.json"), t.TempDir()
	opts := func(o *Options) { o.StateFile, o.StateDir = stateFile, stateDir }
	s, clk := start(t, opts)
	_, v, _ := volumeCall(t, s, "POST", "volumes", volumeBody("data", "tok-1", 10))
	_, w, _ := volumeCall(t, s, "POST", "volumes", volumeBody("logs", "tok-2", 20))
	a := createIn(t, s, "a-t4x1-euw1b")
	clk.Advance(4 * time.Second)
	volumeCall(t, s, "POST", "volumes/"+v.ID+"/attach", map[string]string{"instance_id": a.ID})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, _ := start(t, func(o *Options) { opts(o); o.Clock = clk })
	vols, err := s2.Volumes("c1")
	if err != nil || len(vols) != 2 || vols[0].ID != v.ID || vols[0].AttachedTo != a.ID || vols[1].ID != w.ID || vols[1].SizeGB != 20 {
		t.Fatalf("after a restart: %+v, %v", vols, err)
	}
	if st, again, _ := volumeCall(t, s2, "POST", "volumes", volumeBody("logs", "tok-2", 20)); st != http.StatusOK || again.ID != w.ID {
		t.Errorf("token replay after a restart: %d %s, want 200 %s", st, again.ID, w.ID)
	}
	_, x, _ := volumeCall(t, s2, "POST", "volumes", volumeBody("more", "tok-3", 1))
	if x.ID <= w.ID {
		t.Errorf("new volume id %s after a restart is not after %s", x.ID, w.ID)
	}
	if b, err := os.ReadFile(filepath.Join(s2.VolumeDir("c1", w.ID), "size_gb")); err != nil || string(b) != "20\n" {
		t.Errorf("the volume's data after a restart: %q, %v", b, err)
	}
	if st, _, code := volumeCall(t, s2, "DELETE", "volumes/"+v.ID, nil); code != CodeVolumeInUse {
		t.Errorf("delete the attached volume after a restart: %d %s, want volume_in_use", st, code)
	}
}

// TestVolumeCarriesFilesAcrossInstances is the feature end to end, over
// SSH: a machine formats its blank volume, mounts it, writes a file and
// is deleted with the volume kept; a new machine of the zone finds the
// file system already there (no format) and reads the file.
func TestVolumeCarriesFilesAcrossInstances(t *testing.T) {
	e := newGPUEnv(t, nil)
	s := e.s
	_, v, _ := volumeCall(t, s, "POST", "volumes", map[string]any{"name": "data", "zone": "us-east-1a", "size_gb": 50})
	a := e.create("cpu-4")
	st, att, _ := volumeCall(t, s, "POST", "volumes/"+v.ID+"/attach", map[string]string{"instance_id": a.ID})
	if st != http.StatusOK || !strings.HasPrefix(att.Device, s.SandboxDir("c1", a.ID)) {
		t.Fatalf("attach to A: %d %+v", st, att)
	}
	dev := att.Device
	run := func(in Instance, cmd string, wantRC int) string {
		t.Helper()
		out, rc := e.run(in, cmd)
		if rc != wantRC {
			t.Fatalf("%s: %q exited %d, want %d:\n%s", in.ID, cmd, rc, wantRC, out)
		}
		return out
	}
	if out := run(a, "blkid "+dev, 2); out != "" {
		t.Errorf("blkid of a blank device printed %q", out)
	}
	if out := run(a, "mkdir data && mount "+dev+" data 2>&1", 32); !strings.Contains(out, "wrong fs type, bad option, bad superblock") {
		t.Errorf("mount of a blank device: %q", out)
	}
	if out := run(a, "mkfs.ext4 "+dev+" 2>&1", 0); !strings.Contains(out, "Filesystem UUID: ") || !strings.Contains(out, "13107200 4k blocks") {
		t.Errorf("mkfs.ext4: %q", out)
	}
	blkid := run(a, "blkid "+dev, 0)
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(dev) + `: UUID="[0-9a-f-]{36}" TYPE="ext4"\n$`).MatchString(blkid) {
		t.Errorf("blkid of the formatted device: %q", blkid)
	}
	if out := run(a, "mkfs.ext4 "+dev+" </dev/null 2>&1", 1); !strings.Contains(out, "contains a ext4 file system") || !strings.Contains(out, "Proceed anyway? (y,N)") {
		t.Errorf("mkfs.ext4 without -F on a formatted device: %q", out)
	}
	run(a, "mount "+dev+" data && echo hello from A >data/hello.txt && mountpoint -q data", 0)
	if out := run(a, "findmnt -n data", 0); !regexp.MustCompile(`^\S+/data ` + regexp.QuoteMeta(dev) + ` ext4 rw,relatime\n$`).MatchString(out) {
		t.Errorf("findmnt -n data: %q", out)
	}
	run(a, "umount data && ls -A data", 0)
	run(a, "mountpoint -q data", 32)
	if out := run(a, "umount data 2>&1", 32); !strings.Contains(out, "not mounted") {
		t.Errorf("umount twice: %q", out)
	}

	if st, _, _ := volumeCall(t, s, "POST", "volumes/"+v.ID+"/detach", map[string]string{"instance_id": a.ID}); st != http.StatusOK {
		t.Fatalf("detach: %d", st)
	}
	run(a, "blkid "+dev, 2) // the device is gone from A
	request(t, s, "DELETE", "/clouds/c1/v1/instances/"+a.ID, s.APIKey("c1"), nil, nil)
	e.clk.Advance(time.Second)

	b := e.create("cpu-4")
	st, att, _ = volumeCall(t, s, "POST", "volumes/"+v.ID+"/attach", map[string]string{"instance_id": b.ID})
	if st != http.StatusOK {
		t.Fatalf("attach to B: %d", st)
	}
	dev = att.Device
	if out := run(b, "blkid -o value -s TYPE "+dev, 0); out != "ext4\n" {
		t.Errorf("blkid -o value -s TYPE on B: %q, want ext4 (no format needed)", out)
	}
	if _, uuidA, _ := strings.Cut(blkid, "UUID="); !strings.Contains(run(b, "blkid "+dev, 0), "UUID="+uuidA[:38]) {
		t.Errorf("B sees another file system than A made")
	}
	// An absolute mount point outside the sandbox is taken under it.
	if out := run(b, "mkdir -p mnt/data && mount "+dev+" /mnt/data && cat mnt/data/hello.txt && findmnt -n -o TARGET /mnt/data", 0); out != "hello from A\n/mnt/data\n" {
		t.Errorf("on B: %q, want A's file and the mount point", out)
	}
	if out := run(b, "ls -A mnt/data", 0); out != "hello.txt\nlost+found\n" {
		t.Errorf("B's mount holds %q", out)
	}
	if out := run(b, "mkfs.ext4 -F "+dev+" 2>&1", 1); !strings.Contains(out, "busy") {
		t.Errorf("mkfs.ext4 of a mounted device: %q", out)
	}
	if out := run(b, "mkdir full && touch full/f && mount "+dev+" full 2>&1", 32); !strings.Contains(out, "not empty") {
		t.Errorf("mount on a folder with files: %q", out)
	}
	// Formatting again (-F) empties the file system.
	if out := run(b, "umount /mnt/data && mkfs.ext4 -F -q "+dev+" && mount "+dev+" mnt/data && ls -A mnt/data", 0); out != "lost+found\n" {
		t.Errorf("after mkfs.ext4 -F: %q, want an empty file system", out)
	}
}
