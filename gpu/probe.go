package gpu

import (
	"fmt"
	"strings"
)

// Fields is the --query-gpu field list the probe reads, in this order.
var Fields = []string{
	"index", "uuid", "serial", "name", "pci.bus_id", "memory.total", "driver_version", "ecc.mode.current",
	"ecc.errors.uncorrected.volatile.total", "retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure",
	"pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
	"clocks_throttle_reasons.active", "temperature.gpu",
}

// baseFields are the fields every driver the probe supports knows: the
// probe asks for them alone when the driver refuses Fields (exit status
// 2: "Field ... is not a valid field to query."), and the parser reports the
// others as not readable.
var baseFields = []string{
	"index", "uuid", "serial", "name", "pci.bus_id", "memory.total", "driver_version", "ecc.mode.current",
	"ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
	"pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
	"clocks_throttle_reasons.active", "temperature.gpu",
}

// ProbeOptions shape the probe.
type ProbeOptions struct {
	// DCGMLevel asks for DCGM's diagnostic as well: 0 none, 1 (about a
	// minute) or 2 (a few minutes). Script never runs it: the caller runs
	// DCGMScript(DCGMLevel) as a second, separate command where it is not
	// 0, and appends its output to Script's before Parse.
	DCGMLevel int
	// Timeout bounds each command of the script, in seconds (default 20),
	// where the machine has timeout(1).
	Timeout int
}

// marker starts every line the script itself prints.
const marker = "@@gpuprov "

// Script returns the probe: one POSIX sh command line (sh -c '…') that
// reads, and changes nothing. It runs as the login user; it tries
// `sudo -n` only for the kernel log and only where it cannot prompt. Its
// output is sections, each "@@gpuprov NAME", the command's output (stdout
// and stderr), then "@@gpuprov rc N":
//
//	query       nvidia-smi --query-gpu=Fields --format=csv,noheader,nounits
//	query-base  the same with the fields every driver knows, when query exits 2
//	q           nvidia-smi -q (the CUDA version, each GPU's Fabric state, and
//	            the query's facts again, used when the query lists no GPU)
//	bus         lspci -D -n -d 10de: (where lspci is absent, the same lines
//	            made from /sys/bus/pci/devices/*/{vendor,class,device})
//	fm          systemctl is-active nvidia-fabricmanager, where an NVSwitch is on the bus
//	xid         the kernel log's "NVRM: Xid" lines (dmesg, sudo -n dmesg, or journalctl -k -b)
//	boot        /proc/sys/kernel/random/boot_id
//
// The script exits 0; each section carries its command's status. Every
// command runs under timeout(1) where the machine has it, and the kernel
// log is cut to its last 200 Xid lines; an empty kernel log (journalctl
// without the right to read the system journal prints nothing and exits 0)
// counts as unreadable. GPUPROV_SYSFS, where set, stands
// for /sys (for tests).
func Script(o ProbeOptions) string {
	to := o.Timeout
	if to <= 0 {
		to = 20
	}
	var b strings.Builder
	fmt.Fprintf(&b, `export LC_ALL=C
t() { if command -v timeout >/dev/null 2>&1; then timeout %d "$@"; else "$@"; fi; }
s() { echo "@@gpuprov $1"; }
e() { echo "@@gpuprov rc $1"; }
s query; t nvidia-smi --query-gpu=%s --format=csv,noheader,nounits 2>&1; rc=$?; e $rc
if [ "$rc" -eq 2 ]; then s query-base; t nvidia-smi --query-gpu=%s --format=csv,noheader,nounits 2>&1; e $?; fi
s q; t nvidia-smi -q 2>&1; e $?
s bus
if command -v lspci >/dev/null 2>&1; then bus=$(t lspci -D -n -d 10de: 2>&1); rc=$?
else bus=""; rc=0; for d in "${GPUPROV_SYSFS:-/sys}"/bus/pci/devices/*; do
  [ "$(cat "$d/vendor" 2>/dev/null)" = "0x10de" ] || continue
  c=$(cat "$d/class" 2>/dev/null); v=$(cat "$d/device" 2>/dev/null)
  bus="$bus${d##*/} $(printf %%s "$c" | cut -c3-6): 10de:$(printf %%s "$v" | cut -c3-)
"; done; fi
printf "%%s\n" "$bus" | grep -v "^$"; e $rc
if printf "%%s\n" "$bus" | grep -q " 0680: 10de:"; then s fm; t systemctl is-active nvidia-fabricmanager 2>&1; e $?; fi
s xid
log=$(t dmesg 2>/dev/null); rc=$?
if [ "$rc" -ne 0 ] || [ -z "$log" ]; then log=$(t sudo -n dmesg 2>/dev/null); rc=$?; fi
if [ "$rc" -ne 0 ] || [ -z "$log" ]; then log=$(t journalctl -k -b --no-pager -q 2>/dev/null); rc=$?; fi
if [ "$rc" -eq 0 ] && [ -z "$log" ]; then rc=1; fi
printf "%%s\n" "$log" | grep "NVRM: Xid" | tail -n 200; e $rc
s boot; cat /proc/sys/kernel/random/boot_id 2>&1; e $?
exit 0
`, to, strings.Join(Fields, ","), strings.Join(baseFields, ","))
	return "sh -c '" + b.String() + "'"
}

// DCGMScript returns the command that runs DCGM's diagnostic at level
// (1: about a minute at most, 2: a few minutes) as one section "dcgm"
// (`dcgmi diag -r LEVEL -j`; status 127 where dcgmi is not installed).
// Parse reads it appended to Script's output.
func DCGMScript(level int) string {
	level = max(1, min(level, 2))
	to := 120
	if level >= 2 {
		to = 900
	}
	return fmt.Sprintf(`sh -c 'echo "@@gpuprov dcgm"; if command -v dcgmi >/dev/null 2>&1; then `+
		`if command -v timeout >/dev/null 2>&1; then timeout %d dcgmi diag -r %d -j 2>&1; else dcgmi diag -r %d -j 2>&1; fi; echo "@@gpuprov rc $?"; `+
		`else echo "dcgmi: not installed"; echo "@@gpuprov rc 127"; fi'`, to, level, level)
}
