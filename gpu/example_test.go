package gpu_test

import (
	"fmt"
	"os"

	"github.com/org/gpuprov/gpu"
)

// The smallest real use: run gpu.Script on the machine (one SSH command),
// parse what it printed and judge it against the offer. Here the output is
// assembled from the real L4's nvidia-smi -q in testdata, as if its GPU
// query had failed.
func ExampleCheck() {
	q, err := os.ReadFile("testdata/gls-l4/q.stdout")
	if err != nil {
		panic(err)
	}
	out := "@@gpuprov query\nNo devices were found\n@@gpuprov rc 6\n@@gpuprov q\n" + string(q) + "@@gpuprov rc 0\n"
	p, err := gpu.Parse([]byte(out))
	if err != nil {
		panic(err)
	}
	r := gpu.Check(p, gpu.Expect{Model: "L4", Count: 1}, gpu.Options{})
	fmt.Println(r.Err())
	for _, f := range r.Findings {
		fmt.Println(f.Severity, f.Check, f.Message)
	}
	// Output:
	// gpu acceptance: GPU 0 (0000:01:00.0) runs its PCIe link at x8 of x16
	// warn driver the GPU query listed no GPU (No devices were found); the GPUs were read from nvidia-smi -q
	// critical link GPU 0 (0000:01:00.0) runs its PCIe link at x8 of x16
}
