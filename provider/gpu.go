package provider

import (
	"fmt"
	"sort"
	"strings"
)

// GPUModel is one GPU model under its canonical name, with the names clouds
// use for it. Every adapter maps its vendor names to these canonical names
// through [LookupGPU]; a request names canonical GPUs (aliases are accepted
// and canonicalized before planning).
type GPUModel struct {
	Name     string   // canonical: "H100-80GB"
	MemoryGB int      // per GPU
	Aliases  []string // vendor spellings, matched case-insensitively
}

// gpuTable is the one table every adapter shares. Aliases are the spellings
// found in the clouds' APIs and catalogs (AWS instance-type GPU names, GCP
// accelerator types, Lambda instance types, RunPod GPU type ids, Prime
// Intellect gpu types), compared after normalization (lowercase, with
// spaces, underscores and dashes dropped).
var gpuTable = []GPUModel{
	{"B200", 180, []string{"nvidia-b200", "NVIDIA B200", "B200_180GB"}},
	{"H200", 141, []string{"nvidia-h200-141gb", "NVIDIA H200", "H200_141GB", "H200-141GB", "h200_sxm"}},
	{"GH200", 96, []string{"nvidia-gh200", "NVIDIA GH200 480GB", "GH200_96GB", "gh200", "GH200_480GB"}},
	{"H100-80GB", 80, []string{"H100", "nvidia-h100-80gb", "nvidia-h100-mega-80gb", "NVIDIA H100 80GB HBM3", "H100_80GB", "h100_sxm5", "h100_pcie", "H100 SXM", "H100 PCIe", "NVIDIA H100 PCIe"}},
	{"H100-NVL", 94, []string{"NVIDIA H100 NVL", "H100_NVL", "h100nvl"}},
	{"A100-80GB", 80, []string{"nvidia-a100-80gb", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "A100_80GB", "a100_80gb_sxm4", "a100_80gb_pcie", "A100 80GB"}},
	{"A100-40GB", 40, []string{"A100", "nvidia-tesla-a100", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "A100_40GB", "a100_sxm4", "a100_pcie"}},
	{"L40S", 48, []string{"NVIDIA L40S", "L40S_48GB", "nvidia-l40s"}},
	{"L40", 48, []string{"NVIDIA L40", "L40_48GB"}},
	{"L4", 24, []string{"nvidia-l4", "NVIDIA L4", "L4_24GB"}},
	{"A10G", 24, []string{"NVIDIA A10G", "A10G_24GB"}},
	{"A10", 24, []string{"NVIDIA A10", "A10_24GB", "a10_pcie"}},
	{"A6000", 48, []string{"RTX A6000", "NVIDIA RTX A6000", "RTXA6000", "A6000_48GB"}},
	{"RTX6000-ADA", 48, []string{"NVIDIA RTX 6000 Ada Generation", "RTX6000Ada", "RTX6000_ADA_48GB", "rtx6000_ada"}},
	{"A40", 48, []string{"NVIDIA A40", "A40_48GB"}},
	{"RTX4090", 24, []string{"NVIDIA GeForce RTX 4090", "RTX 4090", "RTX4090_24GB"}},
	{"T4", 16, []string{"nvidia-tesla-t4", "Tesla T4", "NVIDIA T4", "T4_16GB"}},
	{"V100", 16, []string{"nvidia-tesla-v100", "Tesla V100", "V100-16GB", "V100_16GB", "Tesla V100-SXM2-16GB", "v100_sxm2"}},
	{"V100-32GB", 32, []string{"Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB", "V100_32GB"}},
	{"P100", 16, []string{"nvidia-tesla-p100", "Tesla P100", "P100_16GB"}},
	{"P4", 8, []string{"nvidia-tesla-p4", "Tesla P4", "P4_8GB"}},
}

var gpuIndex = func() map[string]*GPUModel {
	m := make(map[string]*GPUModel)
	for i := range gpuTable {
		g := &gpuTable[i]
		for _, n := range append([]string{g.Name}, g.Aliases...) {
			k := normalizeGPU(n)
			if prev, dup := m[k]; dup && prev != g {
				panic(fmt.Sprintf("provider: GPU alias %q names both %s and %s", n, prev.Name, g.Name))
			}
			m[k] = g
		}
	}
	return m
}()

func normalizeGPU(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '_', '-':
			return -1
		}
		return r
	}, strings.ToLower(strings.TrimSpace(s)))
}

// LookupGPU finds a GPU model by canonical name or alias, ignoring case,
// spaces, dashes and underscores.
func LookupGPU(name string) (GPUModel, bool) {
	g, ok := gpuIndex[normalizeGPU(name)]
	if !ok {
		return GPUModel{}, false
	}
	return *g, true
}

// GPUNames returns the canonical GPU names, sorted.
func GPUNames() []string {
	names := make([]string, len(gpuTable))
	for i, g := range gpuTable {
		names[i] = g.Name
	}
	sort.Strings(names)
	return names
}

// UnknownGPUError is returned for a GPU name no table entry knows. Its
// message suggests the nearest known names (Suggestions), or lists the known
// names when none is near.
type UnknownGPUError struct {
	Name string
	// Suggestions are the canonical names nearest to Name, at most three,
	// nearest first; empty when none is near enough to be a likely typo.
	Suggestions []string
}

func (e *UnknownGPUError) Error() string {
	switch len(e.Suggestions) {
	case 0:
		return fmt.Sprintf("unknown GPU %q (known: %s)", e.Name, strings.Join(GPUNames(), ", "))
	case 1:
		return fmt.Sprintf("unknown GPU %q: did you mean %s?", e.Name, e.Suggestions[0])
	}
	n := len(e.Suggestions)
	return fmt.Sprintf("unknown GPU %q: did you mean %s or %s?", e.Name, strings.Join(e.Suggestions[:n-1], ", "), e.Suggestions[n-1])
}

// maxSuggestions bounds UnknownGPUError.Suggestions.
const maxSuggestions = 3

// SuggestGPU returns the canonical names nearest to name, nearest first, at
// most three: those whose canonical name or an alias starts with name or is
// within a few edits of it (more for longer names), ignoring case, spaces,
// dashes and underscores, and counting the look-alikes o/0 and l/i/1 as the
// same character ("H1OO" is H100-80GB). Only the nearest are returned; nil
// when nothing is that near.
func SuggestGPU(name string) []string {
	in := foldLookAlikes(normalizeGPU(name))
	if in == "" {
		return nil
	}
	// Scores are doubled edit distances, so that a spelling that starts
	// with the input ("h10" of "h100") ranks between an exact match and one
	// edit.
	limit := 2 * (1 + len(in)/4)
	best := map[string]int{} // canonical name → its nearest spelling's score
	for _, g := range gpuTable {
		for _, n := range append([]string{g.Name}, g.Aliases...) {
			spelling := foldLookAlikes(normalizeGPU(n))
			d := 2 * editDistance(in, spelling)
			if d > 0 && len(in) >= 3 && strings.HasPrefix(spelling, in) {
				d = 1
			}
			if prev, ok := best[g.Name]; d <= limit && (!ok || d < prev) {
				best[g.Name] = d
			}
		}
	}
	if len(best) == 0 {
		return nil
	}
	names := make([]string, 0, len(best))
	for n := range best {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if best[names[i]] != best[names[j]] {
			return best[names[i]] < best[names[j]]
		}
		return names[i] < names[j]
	})
	// Only the nearest distance: a farther name next to an obvious match is noise.
	cut := 0
	for cut < len(names) && cut < maxSuggestions && best[names[cut]] == best[names[0]] {
		cut++
	}
	return names[:cut]
}

// foldLookAlikes maps characters that are easily typed for one another
// (o and 0, l and i and 1) to one of them.
func foldLookAlikes(s string) string {
	return strings.NewReplacer("o", "0", "l", "1", "i", "1").Replace(s)
}

// editDistance is the Levenshtein distance between a and b, in bytes (GPU
// names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// CanonicalGPU returns the canonical name of a GPU name or alias, or an
// *UnknownGPUError suggesting the nearest names (see SuggestGPU).
func CanonicalGPU(name string) (string, error) {
	g, ok := LookupGPU(name)
	if !ok {
		return "", &UnknownGPUError{Name: name, Suggestions: SuggestGPU(name)}
	}
	return g.Name, nil
}
