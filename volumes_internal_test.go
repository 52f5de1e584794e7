package gpuprov

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
)

// mountWorld is a directory of stand-ins for the tools mountCommand runs
// (blkid, mkfs.ext4, mount, mountpoint, sudo, sleep), each logging its
// call; sleep makes the device appear when appear is set, so a late udev
// link is shown without waiting on the real clock.
func mountWorld(t *testing.T, appear bool) (dir, dev, log string) {
	t.Helper()
	dir = t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	dev, log = filepath.Join(dir, "dev-by-id"), filepath.Join(dir, "calls")
	onSleep := ":"
	if appear {
		onSleep = ": > " + dev
	}
	tools := map[string]string{
		// blkid: 0 when the device holds a file system (here: any
		// content), 2 when it is blank or does not exist — the case the
		// wait guards against.
		"blkid":      `[ -s "$1" ] && exit 0; exit 2`,
		"mkfs.ext4":  `echo ext4 > "$2"`,
		"mount":      `exit 0`,
		"mountpoint": `exit 1`,
		"mkdir":      `exit 0`,
		"sudo":       `shift; exec "$@"`,
		"sleep":      onSleep,
	}
	for name, body := range tools {
		script := "#!/bin/sh\necho " + name + " \"$@\" >> " + log + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, dev, log
}

func runMount(t *testing.T, dir, dev string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", mountCommand(dev, "/data"))
	cmd.Env = []string{"PATH=" + filepath.Join(dir, "bin") + ":" + os.Getenv("PATH"), "GPUPROV_ROOT=" + dir}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A device whose link appears only after the cloud said the volume was
// attached is waited for, and judged blank or not once it exists; one that
// never appears fails the mount without formatting anything.
func TestMountCommandWaitsForTheDevice(t *testing.T) {
	t.Run("appears late", func(t *testing.T) {
		dir, dev, log := mountWorld(t, true)
		out, err := runMount(t, dir, dev)
		if err != nil {
			t.Fatalf("mount: %v: %s", err, out)
		}
		calls, _ := os.ReadFile(log)
		got := strings.Fields(strings.ReplaceAll(string(calls), dev, "DEV"))
		if i, j := strings.Index(string(calls), "sleep"), strings.Index(string(calls), "blkid"); i < 0 || j < i {
			t.Fatalf("blkid ran before the device appeared: calls\n%s", calls)
		}
		if !strings.Contains(out, "formatted") || !strings.Contains(out, "mounted at") {
			t.Fatalf("output %q (calls %v)", out, got)
		}
	})
	t.Run("holds data", func(t *testing.T) {
		dir, dev, log := mountWorld(t, false)
		if err := os.WriteFile(dev, []byte("ext4 with a checkpoint"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := runMount(t, dir, dev)
		calls, _ := os.ReadFile(log)
		if err != nil || strings.Contains(string(calls), "mkfs") || strings.Contains(string(calls), "sleep") {
			t.Fatalf("mount of a present device with data: %v: %s; calls\n%s", err, out, calls)
		}
	})
	t.Run("never appears", func(t *testing.T) {
		dir, dev, log := mountWorld(t, false)
		out, err := runMount(t, dir, dev)
		calls, _ := os.ReadFile(log)
		if err == nil || !strings.Contains(out, "did not appear") {
			t.Fatalf("mount of a missing device: %v: %s", err, out)
		}
		if strings.Contains(string(calls), "mkfs") || strings.Contains(string(calls), "blkid") {
			t.Fatalf("a missing device was judged or formatted: calls\n%s", calls)
		}
		if n := strings.Count(string(calls), "sleep"); n != deviceWait {
			t.Fatalf("waited %d times, want %d", n, deviceWait)
		}
	})
}

// zonalStub is a provider whose volumes are zonal.
type zonalStub struct {
	provider.CloudProvider
	provider.VolumeManager
}

func (zonalStub) VolumeLimits() provider.VolumeLimits {
	return provider.VolumeLimits{Scope: provider.VolumeZonal, MinGB: 4, MaxGB: 100}
}

// An offer of a region (a provider configured without zones) cannot take a
// zonal volume: the plan leaves it out saying so, instead of a create that
// the cloud's adapter refuses after the launch began.
func TestZonalVolumesNeedAnOfferWithAZone(t *testing.T) {
	p := &Provisioner{providers: map[string]*paced{"z": {CloudProvider: zonalStub{}}}}
	req := &Request{Volumes: []VolumeRequest{{Name: "data", SizeGB: 10, MountPath: "/data"}}}
	regional := provider.Offer{Provider: "z", Location: provider.Location{Region: "westus3"}}
	if why := p.volumeMisfit(req, &regional, nil); !strings.Contains(why, "names no zone") {
		t.Fatalf("regional offer: misfit %q, want one naming the missing zone", why)
	}
	zonal := provider.Offer{Provider: "z", Location: provider.Location{Region: "westus3", Zone: "1"}}
	if why := p.volumeMisfit(req, &zonal, nil); why != "" {
		t.Fatalf("zonal offer: misfit %q", why)
	}
}

// A volume the cloud mounted at create is waited for and, where the cloud
// chose the path, linked to the asked one; a path that never becomes a
// mount point fails the launch's mount step, and an asked path that holds
// files is not replaced by the link.
func TestMountedCommand(t *testing.T) {
	world := func(t *testing.T) (root, bin, marker string) {
		root = t.TempDir()
		bin = filepath.Join(root, "bin")
		marker = filepath.Join(root, "mounted-now")
		if err := os.Mkdir(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		tools := map[string]string{
			// mountpoint -q PATH: a mount point once the cloud has
			// mounted it (the marker), and PATH is a directory.
			"mountpoint": `[ -e ` + marker + ` ] && [ -d "$2" ]`,
			"sleep":      `: > ` + marker,
			"sudo":       `shift; exec "$@"`,
		}
		for name, body := range tools {
			if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return root, bin, marker
	}
	run := func(root, bin, fixed, path string) (string, error) {
		cmd := exec.Command("sh", "-c", mountedCommand(fixed, path))
		cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "GPUPROV_ROOT=" + root}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Run("at the asked path", func(t *testing.T) {
		root, bin, _ := world(t)
		if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := run(root, bin, "", "/data"); err != nil || !strings.Contains(out, "mounted at") {
			t.Fatalf("%v: %s", err, out)
		}
	})
	t.Run("at the cloud's path", func(t *testing.T) {
		root, bin, _ := world(t)
		if err := os.MkdirAll(filepath.Join(root, "mnt/nfs/gpuprov--data"), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := run(root, bin, "/mnt/nfs/gpuprov--data", "/work/data")
		if err != nil || !strings.Contains(out, "linked") {
			t.Fatalf("%v: %s", err, out)
		}
		if got, _ := os.Readlink(filepath.Join(root, "work/data")); got != filepath.Join(root, "mnt/nfs/gpuprov--data") {
			t.Fatalf("link points at %q", got)
		}
		if out, err := run(root, bin, "/mnt/nfs/gpuprov--data", "/work/data"); err != nil || strings.Contains(out, "linked") {
			t.Fatalf("second run (idempotent): %v: %s", err, out)
		}
	})
	t.Run("asked path holds files", func(t *testing.T) {
		root, bin, _ := world(t)
		for _, d := range []string{"mnt/nfs/v", "data"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(root, "data/keep"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := run(root, bin, "/mnt/nfs/v", "/data")
		if err == nil || !strings.Contains(out, "not an empty directory") {
			t.Fatalf("%v: %s", err, out)
		}
		if _, err := os.Stat(filepath.Join(root, "data/keep")); err != nil {
			t.Fatalf("the asked path's file is gone: %v", err)
		}
	})
	t.Run("never mounted", func(t *testing.T) {
		root, bin, _ := world(t)
		if err := os.WriteFile(filepath.Join(bin, "sleep"), []byte("#!/bin/sh\n:\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := run(root, bin, "", "/data")
		if err == nil || !strings.Contains(out, "is not mounted after") {
			t.Fatalf("%v: %s", err, out)
		}
	})
}

// checkedStub is a provider whose cloud refuses mount paths outside /data
// (provider.VolumeChecker).
type checkedStub struct{ zonalStub }

func (checkedStub) CheckVolume(o *provider.Offer, name, mountPath string) error {
	if !strings.HasPrefix(mountPath, "/data") {
		return provider.Errorf(provider.InvalidRequest, "c", "plan", "mounts only under /data, not %s", mountPath)
	}
	return nil
}

// A cloud's own rules for a volume (provider.VolumeChecker) leave its
// offers out at plan time, with the cloud's reason.
func TestVolumeCheckerLeavesOffersOut(t *testing.T) {
	p := &Provisioner{providers: map[string]*paced{"c": {CloudProvider: checkedStub{}}}}
	o := provider.Offer{Provider: "c", Location: provider.Location{Region: "r", Zone: "z"}}
	req := &Request{Volumes: []VolumeRequest{{Name: "data", SizeGB: 10, MountPath: "/mnt/data"}}}
	if why := p.volumeMisfit(req, &o, nil); !strings.Contains(why, "volume data") || !strings.Contains(why, "mounts only under /data") {
		t.Fatalf("misfit %q, want the cloud's reason naming the volume", why)
	}
	req.Volumes[0].MountPath = "/data/x"
	if why := p.volumeMisfit(req, &o, nil); why != "" {
		t.Fatalf("misfit %q for a path the cloud takes", why)
	}
}
