package vastai

import (
	"math"
	"strings"

	"github.com/org/gpuprov/provider"
)

// vastGPUNames are the gpu_name values Vast's search knows, the choices of
// the CLI's --gpu-name (vast-ai/docs cli/reference/launch-instance.mdx,
// which writes them with '_' for ' '; the search takes them with spaces, as
// the CLI's query parser sends them). The ones provider.CanonicalGPU knows
// are what Plan searches for; the rest have no canonical name.
var vastGPUNames = []string{
	"A10", "A100 PCIE", "A100 SXM4", "A100X", "A10g", "A40", "A800 PCIE", "B200", "H100 NVL", "H100 PCIE",
	"H100 SXM", "H200", "H200 NVL", "L4", "L40", "L40S", "Q RTX 4000", "Q RTX 5000", "Q RTX 6000", "Q RTX 8000",
	"RTX 2000Ada", "RTX 3090", "RTX 3090 Ti", "RTX 4000Ada", "RTX 4090", "RTX 4090D", "RTX 4500Ada", "RTX 5000Ada",
	"RTX 5090", "RTX 5880Ada", "RTX 6000Ada", "RTX A4000", "RTX A4500", "RTX A5000", "RTX A6000", "RTX PRO 6000 S",
	"RTX PRO 6000 WS", "Tesla P100", "Tesla P4", "Tesla P40", "Tesla T4", "Tesla V100", "Titan RTX", "Titan V",
}

// searchNames maps a canonical GPU to the gpu_name values whose offers may
// be it: a name canonicalizes to one model of a family (A100 SXM4 →
// A100-40GB), and the offer's memory picks the family member (canonical).
var searchNames = func() map[string][]string {
	m := map[string][]string{}
	for _, n := range vastGPUNames {
		c, err := provider.CanonicalGPU(n)
		if err != nil {
			continue
		}
		for _, sib := range family(c) {
			m[sib] = append(m[sib], n)
		}
	}
	return m
}()

// family returns the canonical names sharing canonical's model before the
// memory suffix ("A100-40GB" → A100-40GB, A100-80GB).
func family(canonical string) []string {
	stem, _, _ := strings.Cut(canonical, "-")
	var out []string
	for _, n := range provider.GPUNames() {
		if s, _, _ := strings.Cut(n, "-"); s == stem {
			out = append(out, n)
		}
	}
	return out
}

// canonical returns the canonical GPU of an offer's gpu_name and per-GPU
// memory (gpu_ram, MB). Vast names an A100 "A100 SXM4" whether it has 40 or
// 80 GB, so the member of the name's family whose memory is nearest the
// offer's wins; a name provider.CanonicalGPU does not know has none.
func canonical(name string, ramMB float64) (provider.GPUModel, bool) {
	c, err := provider.CanonicalGPU(name)
	if err != nil {
		return provider.GPUModel{}, false
	}
	best, _ := provider.LookupGPU(c)
	if ramMB <= 0 {
		return best, true
	}
	gb := ramMB / 1024
	for _, n := range family(c) {
		g, _ := provider.LookupGPU(n)
		if math.Abs(float64(g.MemoryGB)-gb) < math.Abs(float64(best.MemoryGB)-gb) {
			best = g
		}
	}
	return best, true
}
