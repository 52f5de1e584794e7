// Package gpu judges a machine's GPUs before gpuprov calls it ready (the
// acceptance phase) and later on request (Provisioner.Health with
// HealthGPU). It only reads: it changes no GPU setting, resets nothing, and
// needs no root.
//
// Script is the probe: one SSH command (sh -c '…') run as the login user,
// each step under timeout(1) where the machine has it. It prints sections,
// each "@@gpuprov NAME", the command's output (stdout and stderr), then
// "@@gpuprov rc N":
//
//	query       nvidia-smi --query-gpu=<Fields> --format=csv,noheader,nounits
//	query-base  the fields every supported driver knows, when query exits 2
//	q           nvidia-smi -q: the CUDA version, each GPU's Fabric state,
//	            and the query's facts again (used when the query lists none)
//	bus         lspci -D -n -d 10de:, else the same lines from /sys/bus/pci
//	fm          systemctl is-active nvidia-fabricmanager, with an NVSwitch on the bus
//	xid         the kernel log's "NVRM: Xid" lines: dmesg, else sudo -n dmesg
//	            (never prompts), else journalctl -k -b; the last 200 lines
//	boot        /proc/sys/kernel/random/boot_id
//
// DCGMScript is a second, separate command where ProbeOptions.DCGMLevel
// asks for DCGM's diagnostic (dcgmi diag -r 1 or 2 -j). Parse reads the
// output (DCGMScript's appended) into a Probe; Check judges a Probe against
// the offer (Expect) into a Report; Health compares a later Probe with a
// Report's Baseline.
//
// # Checks
//
// Each finding cites its source: NVIDIA's documentation page and section,
// or gpuprov's GPU table.
//
//	driver       nvidia-smi answers and lists GPUs; else the driver's own words
//	             ("NVIDIA-SMI has failed because it couldn't communicate with the
//	             NVIDIA driver…", "No devices were found", "Unable to determine the
//	             device handle for GPU…: Unknown Error", "GPU is lost")
//	count        the GPUs listed equal Expect.Count; the missing ones are named by
//	             the bus addresses lspci sees and nvidia-smi does not (0000:8a:00.0)
//	model        provider.LookupGPU(name).Name is Expect.Model; an unknown name fails
//	memory       memory.total MiB / 1024 ≥ the model's MemoryGB × (1 − MemoryTolerance),
//	             default tolerance 0.10
//	ecc          no uncorrectable volatile ECC error; ECC disabled only warns
//	retirement   no retired page or row remap pending, no row remap failure
//	link         PCIe link width at its maximum; the generation drops at idle and
//	             is never a fault
//	fabric       on an NVSwitch machine, each GPU's fabric Completed/Success, and
//	             nvidia-fabricmanager active where the bus has NVSwitches
//	xid          no Xid since boot of a kind NVIDIA's Xid catalog answers with a GPU
//	             reset or a reboot (Xids, XidCatalog); other Xids warn
//	throttle     warns: hardware slowdown, hardware thermal, power brake or software
//	             thermal slowdown active
//	temperature  warns: at or above MaxTemperatureC, default 85 C
//	dcgm         no dcgmi diag test FAILs (WARN warns); dcgmi absent is skipped
//	command      the request's own command exits 0 (run and added by the caller)
//
// Options.Ignore turns a check's failures into warnings; Options.Off turns
// a check off. A value nvidia-smi gives as "[N/A]", "[Not Supported]",
// "[Unknown Error]", "[Insufficient Permissions]" or "N/A", a field the
// driver does not know, and a field the output lacks are never read as a
// pass: the check they feed is listed in Report.Skipped with the field and
// the GPU. So are an unreadable kernel log and a fabric manager systemd
// cannot report on.
//
// # Health
//
// Health reports only what is new or worse than a Baseline: an Xid since
// (critical for the reset and reboot kinds), uncorrectable ECC counts
// rising, a row remap failure, pending retirements, slowdowns, a GPU gone,
// the fabric or its manager down, the driver not answering; each under a
// stable code ("gpu-xid-79", "gpu-ecc", "gpu-gone", ...).
//
// The parsers are tested on real outputs kept in testdata (H200, H100, an
// 8-GPU HGX H100, a 4-GPU A100, L4, the head of a T4's -q, an 8-GPU A100's
// lspci with NVSwitches, real Xid lines), each folder's README saying where
// it came from.
package gpu
