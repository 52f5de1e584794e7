#!/bin/sh
# k3semu k3s install script: what the official script does with systemd,
# inside the sandbox: it "downloads" the emulated k3s binary of
# INSTALL_K3S_VERSION (or, with INSTALL_K3S_SKIP_DOWNLOAD=true, requires
# the uploaded one), writes the unit file, enables it, and starts it unless
# INSTALL_K3S_SKIP_START=true.
set -e
. "${GPUPROV_ROOT:?k3semu: GPUPROV_ROOT is not set; refusing to run outside a sandbox}/.k3semu/lib.sh" || exit 1
called install.sh "$@"
info() { echo "[INFO]  $*"; }
fatal() { echo "[ERROR]  $*" >&2; exit 1; }
cmd=${1:-server}
case $cmd in
server) name=k3s ;;
agent) name=k3s-agent ;;
*) fatal "k3semu: only 'server' and 'agent' are emulated, not '$cmd'" ;;
esac
ver=${INSTALL_K3S_VERSION:-}
bin=$ROOT/usr/local/bin/k3s
if [ "${INSTALL_K3S_SKIP_DOWNLOAD:-}" = true ]; then
	[ -x "$bin" ] || fatal "Executable k3s binary not found at /usr/local/bin/k3s"
	info "Skipping k3s download and verify"
else
	[ -n "$ver" ] || fatal "k3semu: set INSTALL_K3S_VERSION: the sandbox cannot reach the release channel"
	info "Using $ver as release"
	info "Downloading binary (emulated)"
	printf 'k3s %s\n' "$ver" >> "$LOGDIR/downloads.log"
	mkdir -p "$(dirname "$bin")"
	sed "s|@VERSION@|$ver|" "$EMU/k3s.tmpl" > "$bin.tmp"
	chmod 755 "$bin.tmp"
	mv -f "$bin.tmp" "$bin"
fi
info "Installing k3s to /usr/local/bin/k3s"
mkdir -p "$ROOT/etc/systemd/system"
cat > "$(unit_file "$name")" <<UNIT
[Unit]
Description=Lightweight Kubernetes (emulated by k3semu)
[Service]
Type=notify
EnvironmentFile=-/etc/systemd/system/$name.service.env
ExecStart=/usr/local/bin/k3s $cmd
Restart=always
RestartSec=5s
[Install]
WantedBy=multi-user.target
UNIT
info "systemd: Creating service file /etc/systemd/system/$name.service"
systemctl daemon-reload
systemctl enable "$name"
info "systemd: Enabling $name unit"
if [ "${INSTALL_K3S_SKIP_START:-}" != true ]; then
	info "systemd: Starting $name"
	systemctl restart "$name"
fi
