package provider

import "testing"

// A volume's identity labels win over the caller's, and mark it apart from
// a VM's own disks, which carry the VM's identity without LabelVolume.
func TestVolumeLabels(t *testing.T) {
	spec := VolumeSpec{Name: "data", UserLabels: map[string]string{"team": "ml", LabelVM: "forged"}}
	got := spec.VolumeLabels("inst-a")
	if got["team"] != "ml" || got[LabelVM] != "data" || got[LabelInstallation] != "inst-a" || got[LabelVolume] != "true" {
		t.Fatalf("labels %v", got)
	}
	if spec.UserLabels[LabelVM] != "forged" {
		t.Fatal("the caller's labels were changed")
	}
	spec.Installation = "inst-b"
	if got := spec.VolumeLabels("inst-a"); got[LabelInstallation] != "inst-b" {
		t.Fatalf("spec's installation not taken: %v", got)
	}
	bootDisk := map[string]string{LabelVM: "data", LabelInstallation: "inst-a"}
	for _, c := range []struct {
		labels map[string]string
		want   bool
	}{{got, false}, {spec.VolumeLabels(""), true}, {bootDisk, false}, {nil, false}} {
		if IsVolumeOf(c.labels, "inst-b") != c.want {
			t.Errorf("IsVolumeOf(%v, inst-b) = %v", c.labels, !c.want)
		}
	}
}
