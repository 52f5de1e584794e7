#!/usr/bin/env bash
# capture.sh - record the real outputs of NVIDIA tools on a GPU machine, as
# test data for gpuprov's nvidia-smi parsers (GPU acceptance checks).
#
# Usage: OUT=/some/dir bash gpu/testdata/h200/capture.sh
#
# It only READS state: it never changes a GPU setting, never resets a GPU and
# runs nothing heavier than `dcgmi diag -r 1` (the quick "deployment" level).
# It never stops at a failing command (no set -e). For each command NAME it
# writes NAME.stdout, NAME.stderr and NAME.rc (exit status; 124 = timed out,
# "skipped" = not run because the time budget was spent) and one line in
# summary.tsv. Pipelines run under `set -o pipefail`, so a pipeline's rc is
# the first failure in it (grep with no match = 1).
#
# Everything is written under $WORK and packed into $OUT/capture.tgz at the end
# (the device tool returns at most 8 files); summary.tsv and run.log are also
# copied to $OUT directly.

OUT=${OUT:-/tmp/capture-out}
WORK=$(mktemp -d /tmp/capture.XXXXXX)
mkdir -p "$OUT" "$WORK/fields"
START=$(date +%s)
BUDGET=${BUDGET:-330}   # seconds after which no new command is started
export LC_ALL=C

elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[$(elapsed)s] $*" | tee -a "$WORK/run.log" >&2; }

printf 'name\trc\tseconds\tcommand\n' >"$WORK/summary.tsv"

# cap NAME TIMEOUT 'shell command'
cap() {
	local name=$1 t=$2 cmd=$3 dir=${CAPDIR:-$WORK}
	if [ "$(elapsed)" -ge "$BUDGET" ]; then
		echo skipped >"$dir/$name.rc"
		printf '%s\t%s\t%s\t%s\n' "$name" skipped 0 "$cmd" >>"$WORK/summary.tsv"
		log "SKIP $name"
		return
	fi
	local s=$(date +%s)
	timeout -k 5 "$t" bash -o pipefail -c "$cmd" >"$dir/$name.stdout" 2>"$dir/$name.stderr" </dev/null
	local rc=$?
	echo "$rc" >"$dir/$name.rc"
	printf '%s\t%s\t%s\t%s\n' "$name" "$rc" $(( $(date +%s) - s )) "$cmd" >>"$WORK/summary.tsv"
	log "rc=$rc $name"
}

FIELDS=index,uuid,serial,name,pci.bus_id,memory.total,driver_version,ecc.mode.current,ecc.mode.pending,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks_throttle_reasons.active,clocks_event_reasons.active,temperature.gpu,power.draw,persistence_mode,compute_mode,mig.mode.current

# Extra single fields probed one by one (some may be unknown to the driver).
EXTRA=count,memory.used,memory.free,vbios_version,compute_cap,pcie.link.gen.gpucurrent,pcie.link.gen.gpumax,pcie.link.gen.hostmax,ecc.errors.uncorrected.aggregate.total,ecc.errors.corrected.aggregate.total,retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,remapped_rows.correctable,remapped_rows.uncorrectable,clocks_throttle_reasons.supported,clocks_event_reasons.supported,clocks_event_reasons.gpu_idle,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.sync_boost,temperature.memory,power.limit,power.draw.instant,mig.mode.pending,fabric.state,fabric.status,driver_model.current,cuda_version,gpu_bus_id,gpu_name

log "start; OUT=$OUT WORK=$WORK"

# --- system -------------------------------------------------------------
cap uname 10 'uname -a'
cap os_release 10 'cat /etc/os-release'
cap id 10 'id'
cap sudo_n 10 'sudo -n true'
cap driver_version_proc 10 'cat /proc/driver/nvidia/version'
cap proc_gpus_information 10 'for f in /proc/driver/nvidia/gpus/*/information; do echo "== $f"; cat "$f"; done'
cap dev_nvidia 10 'ls -la /dev/nvidia* /dev/nvidia-caps 2>&1'
cap which_tools 10 'for c in nvidia-smi nv-fabricmanager nvidia-fabricmanager dcgmi nv-hostengine lspci dmesg journalctl systemctl sudo nvcc; do printf "%s\t%s\n" "$c" "$(command -v $c || echo MISSING)"; done'

# --- nvidia-smi, plain and list -------------------------------------------
cap nvidia_smi 60 'nvidia-smi'
cap nvidia_smi_L 60 'nvidia-smi -L'
cap nvidia_smi_version 60 'nvidia-smi --version'

# --- query-gpu ----------------------------------------------------------------
cap query_gpu_noheader 60 "nvidia-smi --query-gpu=$FIELDS --format=csv,noheader,nounits"
cap query_gpu_csv 60 "nvidia-smi --query-gpu=$FIELDS --format=csv"
cap query_gpu_csv_i0 60 "nvidia-smi --query-gpu=$FIELDS --format=csv -i 0"

# Each field alone, so one unknown field does not hide the others.
for f in ${FIELDS//,/ } ${EXTRA//,/ }; do
	CAPDIR=$WORK/fields cap "$f" 20 "nvidia-smi --query-gpu=$f --format=csv,noheader,nounits"
done
# The same fields in one TSV: field, rc, stdout, stderr (newlines as \n).
for f in ${FIELDS//,/ } ${EXTRA//,/ }; do
	[ -f "$WORK/fields/$f.rc" ] || continue
	printf '%s\t%s\t%s\t%s\n' "$f" "$(cat "$WORK/fields/$f.rc")" \
		"$(sed ':a;N;$!ba;s/\n/\\n/g' "$WORK/fields/$f.stdout" 2>/dev/null)" \
		"$(sed ':a;N;$!ba;s/\n/\\n/g' "$WORK/fields/$f.stderr" 2>/dev/null)"
done >"$WORK/query_gpu_fields.tsv"

cap help_query_gpu 60 'nvidia-smi --help-query-gpu'
cap help_query_remapped_rows 60 'nvidia-smi --help-query-remapped-rows'
cap help_query_retired_pages 60 'nvidia-smi --help-query-retired-pages'
cap query_remapped_rows 60 'nvidia-smi --query-remapped-rows=gpu_bus_id,gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv'
cap query_retired_pages 60 'nvidia-smi --query-retired-pages=gpu_uuid,retired_pages.address,retired_pages.cause --format=csv'

# --- nvidia-smi -q ------------------------------------------------------------
cap q 60 'nvidia-smi -q'
cap q_d_combined 60 'nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,PCI,TEMPERATURE,CLOCK'
cap q_d_combined_nopci 60 'nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,TEMPERATURE,CLOCK'
for d in ECC PAGE_RETIREMENT ROW_REMAPPER PERFORMANCE PCI TEMPERATURE CLOCK MEMORY POWER COMPUTE FABRIC; do
	cap "q_d_$d" 60 "nvidia-smi -q -d $d"
done
cap q_x 60 'nvidia-smi -q -x'
cap q_grep_cuda 60 'nvidia-smi -q | grep -i cuda'
cap q_grep_fabric 60 'nvidia-smi -q | grep -i -A3 fabric'

# --- topology, nvlink, fabric manager ---------------------------------------------
cap topo_m 60 'nvidia-smi topo -m'
cap nvlink_s 60 'nvidia-smi nvlink -s'
cap nvlink_status 60 'nvidia-smi nvlink --status'
cap fm_systemctl 10 'systemctl is-active nvidia-fabricmanager'
cap fm_ls 10 'ls -la /usr/bin/nv-fabricmanager'
cap fm_pgrep 10 'pgrep -a nv-fabricmanager'

# --- kernel log: Xid ------------------------------------------------------------
cap dmesg 30 'dmesg | tail -n 3000'
cap dmesg_nvrm_xid 30 "dmesg 2>&1 | grep -i -E 'NVRM|Xid'"
cap journalctl_xid 30 'journalctl -k --no-pager 2>&1 | grep -i xid | tail'
cap kernlog_xid 30 'cat /var/log/kern.log 2>&1 | grep -i xid | tail'

# --- error texts ----------------------------------------------------------------
cap err_bad_index 60 'nvidia-smi -i 99'
cap err_bad_field 60 'nvidia-smi --query-gpu=no_such_field --format=csv'
cap err_bad_index_query 60 'nvidia-smi --query-gpu=index --format=csv -i 99'

# --- PCIe from the kernel's view --------------------------------------------------
cap lspci_link 30 "lspci -d 10de: -vv 2>&1 | grep -E 'LnkCap|LnkSta|^[0-9a-f]'"
cap lspci_nn 30 'lspci -nn -d 10de:'
cap sysfs_link 10 'for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor 2>/dev/null)" = 0x10de ] || continue; for a in class device current_link_speed current_link_width max_link_speed max_link_width; do printf "%s %s %s\n" "$(basename $d)" $a "$(cat $d/$a 2>&1)"; done; done'

# --- DCGM -------------------------------------------------------------------------
cap dcgm_which 10 'command -v dcgmi nv-hostengine'
cap dcgmi_version 30 'dcgmi --version'
if command -v dcgmi >/dev/null 2>&1; then
	started=0
	if ! pgrep -x nv-hostengine >/dev/null 2>&1 && command -v nv-hostengine >/dev/null 2>&1; then
		cap nv_hostengine_start 30 'nv-hostengine'
		[ "$(cat "$WORK/nv_hostengine_start.rc")" = 0 ] && started=1
	fi
	cap dcgmi_discovery 60 'dcgmi discovery -l'
	BUDGET_SAVE=$BUDGET; [ "$(elapsed)" -lt 180 ] || BUDGET=0
	cap dcgmi_diag_r1 120 'dcgmi diag -r 1'
	cap dcgmi_diag_r1_json 120 'dcgmi diag -r 1 -j'
	BUDGET=$BUDGET_SAVE
	[ "$started" = 1 ] && cap nv_hostengine_stop 30 'nv-hostengine -t'
else
	echo "dcgmi not installed on this machine" >"$WORK/dcgmi_absent.txt"
	log "dcgmi absent"
fi

# --- extras, if time is left -------------------------------------------------------
# Every field that --help-query-gpu lists, in one query (csv with header).
if [ -s "$WORK/help_query_gpu.stdout" ]; then
	# Only tokens that look like field names: the help text also has quoted
	# value lists such as "0: Default". (The 2026-12-04 H200 capture ran
	# before this filter was added, so its query_gpu_all_fields failed with
	# "ERROR: Option Default,1: is not recognized" and is not in testdata.)
	ALL=$(grep -o '^"[^"]*"' "$WORK/help_query_gpu.stdout" | tr -d '"' | grep -E '^[A-Za-z0-9_.]+$' | paste -sd, -)
	echo "$ALL" | tr , '\n' >"$WORK/help_query_gpu.fields"
	cap query_gpu_all_fields 60 "nvidia-smi --query-gpu=$ALL --format=csv"
fi

log "done; packing"
cp "$WORK/summary.tsv" "$WORK/run.log" "$OUT/" 2>/dev/null
tar -C "$WORK" -czf "$OUT/capture.tgz" . && log "packed $(du -k "$OUT/capture.tgz" | cut -f1) KiB"
cp "$WORK/run.log" "$OUT/run.log"
exit 0
