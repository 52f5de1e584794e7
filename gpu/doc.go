// Package gpu judges a machine's GPUs before gpuprov calls it ready (the
// acceptance phase) and later on request (Provisioner.Health with
// HealthGPU). It reads; it never changes a GPU setting, resets nothing,
// and needs no root.
//
// Script is the probe, one SSH command: nvidia-smi's GPU query (Fields, in
// CSV without units), nvidia-smi -q (the CUDA version and each GPU's
// NVSwitch fabric state), the NVIDIA devices on the PCI bus, the fabric
// manager's state where an NVSwitch is on the bus, the kernel log's Xid
// lines and the boot id. Parse reads its output into a Probe; Check judges
// a Probe against the offer (Expect) with thresholds (Options) into a
// Report; Health compares a later Probe with a Report's Baseline.
//
// # Checks
//
//	driver       nvidia-smi answers and lists GPUs; the driver's own words when it does not
//	count        the GPUs listed equal the offer's; the missing ones named by their bus address
//	model        each GPU is the canonical model asked for (provider.LookupGPU of its name)
//	memory       memory.total ≥ the model's memory × (1 − Options.MemoryTolerance), default 0.10
//	ecc          no uncorrectable volatile ECC error (ECC disabled only warns)
//	retirement   no retired page or row remap pending, no row remap failure
//	link         PCIe link width at its maximum (the generation drops at idle: never a fault)
//	fabric       on an NVSwitch machine, fabric state Completed and status Success, and
//	             nvidia-fabricmanager active
//	xid          no Xid since boot of a kind NVIDIA's catalog says needs a GPU reset or a
//	             reboot (Xids); other Xids warn
//	throttle     hardware slowdown, hardware thermal, power brake or software thermal
//	             slowdown active: a warning
//	temperature  at or above Options.MaxTemperatureC (default 85 C) idle: a warning
//	dcgm         dcgmi diag -r 1 or 2 passes, where asked and installed (DCGMScript)
//	command      the request's own command exits 0 (run by the caller)
//
// Any check can be made a warning with Options.Ignore. A field a GPU
// reports as "[N/A]" or "[Not Supported]", or that the driver does not
// know, is never read as a value: the check it feeds is listed in
// Report.Skipped with the field and the GPU.
//
// The parsers are tested on real outputs in testdata: an H200 captured for
// gpuprov and an H100 on an NVSwitch fabric from a public exporter's
// captures, each folder's README saying where it came from.
package gpu
