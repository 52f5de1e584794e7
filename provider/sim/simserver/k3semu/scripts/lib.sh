# k3semu shared library, sourced by every emulated tool. POSIX sh.
#
# State lives under the sandbox root ($GPUPROV_ROOT, resolved to $ROOT):
#   $ROOT/.k3semu/env             options written by k3semu.Install
#   $ROOT/var/lib/k3semu/UNIT.state  "inactive", "activating N" or "active"
#   $ROOT/var/log/k3semu/UNIT.journal  what journalctl -u UNIT prints
#   $ROOT/var/log/k3semu/calls.log   one line per emulated tool invocation
# and, shared by the sandboxes of one cluster, under $K3SEMU_CLUSTER:
#   server/password, server/cahash   the emulated server's secret and CA hash
#   nodes/NAME                       "role=... gpus=N" of each registered node

: "${GPUPROV_ROOT:?k3semu: GPUPROV_ROOT is not set; refusing to run outside a sandbox}"
ROOT=$(cd "$GPUPROV_ROOT" && pwd -P) || { echo "k3semu: cannot enter GPUPROV_ROOT=$GPUPROV_ROOT" >&2; exit 1; }
EMU=$ROOT/.k3semu
[ -f "$EMU/env" ] || { echo "k3semu: $EMU/env is missing; run k3semu.Install" >&2; exit 1; }
. "$EMU/env"
STATE=$ROOT/var/lib/k3semu
LOGDIR=$ROOT/var/log/k3semu
mkdir -p "$STATE" "$LOGDIR"

# called TOOL ARGS...: record an invocation.
called() { printf '%s\n' "$*" >> "$LOGDIR/calls.log"; }

# journal UNIT MESSAGE...: append a line to the unit's journal.
journal() {
	_u=$1; shift
	printf '%s gpuprov-sim %s[%s]: %s\n' "$(date '+%b %d %H:%M:%S')" "$_u" "$$" "$*" >> "$LOGDIR/$_u.journal"
}

unit_file() { printf '%s' "$ROOT/etc/systemd/system/$1.service"; }
unit_state() { cat "$STATE/$1.state" 2>/dev/null || echo inactive; }
set_state() { printf '%s\n' "$2" > "$STATE/$1.state.tmp" && mv -f "$STATE/$1.state.tmp" "$STATE/$1.state"; }

# conf_get KEY FILE: the value of a top-level "KEY: value" line, unquoted.
conf_get() {
	sed -n "s/^$1: *//p" "$2" | head -n 1 | sed "s/^[\"']//; s/[\"']\$//"
}

# conf_labels FILE: the node-label list items, one per line.
conf_labels() {
	awk '/^node-label:/ { f = 1; next } f && /^ *- / { sub(/^ *- */, ""); gsub(/["\047]/, ""); print; next } { f = 0 }' "$1"
}

# publish FILE CONTENT: write a file atomically (shared folder).
publish() {
	mkdir -p "$(dirname "$1")"
	printf '%s\n' "$2" > "$1.tmp.$$" && mv -f "$1.tmp.$$" "$1"
}

# register NAME ROLE CONF: the node joins the emulated cluster, Ready. Its
# nvidia.com/gpu capacity is the sandbox's GPU count when the node carries
# the nvidia.com/gpu.present=true label and has the container toolkit.
register() {
	_gpus=0
	if conf_labels "$3" | grep -qx 'nvidia.com/gpu.present=true' && [ "$K3SEMU_TOOLKIT" = yes ]; then
		_gpus=$K3SEMU_GPUS
	fi
	publish "$K3SEMU_CLUSTER/nodes/$1" "role=$2 gpus=$_gpus"
}

# server_up: the emulated k3s server starts from config.yaml.
server_up() {
	_conf=$ROOT/etc/rancher/k3s/config.yaml
	_tok=$(conf_get token "$_conf" 2>/dev/null)
	_name=$(conf_get node-name "$_conf" 2>/dev/null)
	if [ -z "$_tok" ] || [ -z "$_name" ]; then
		journal k3s 'level=fatal msg="config.yaml: token and node-name are required"'
		return 1
	fi
	case $_tok in K10*) _tok=${_tok#*::}; _tok=${_tok#server:} ;; esac
	_data=$ROOT/var/lib/rancher/k3s/server
	mkdir -p "$_data" "$ROOT/etc/rancher/k3s"
	if [ -f "$_data/cred/passwd" ] && [ "$(cat "$_data/cred/passwd")" != "$_tok" ]; then
		journal k3s 'level=fatal msg="starting kubernetes: preparing server: bootstrap data already found and encrypted with different token"'
		return 1
	fi
	mkdir -p "$_data/cred" "$_data/tls"
	[ -f "$_data/tls/server-ca.crt" ] || od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$_data/tls/server-ca.crt"
	_hash=$(sha256sum < "$_data/tls/server-ca.crt"); _hash=${_hash%% *}
	printf '%s\n' "$_tok" > "$_data/cred/passwd"
	(umask 077 && printf 'K10%s::server:%s\n' "$_hash" "$_tok" > "$_data/token")
	(umask 077 && cat > "$ROOT/etc/rancher/k3s/k3s.yaml" <<KUBECONFIG
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: $(printf '%s' "$_hash" | base64 | tr -d '\n')
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    client-certificate-data: ZW11bGF0ZWQ=
    client-key-data: ZW11bGF0ZWQ=
KUBECONFIG
)
	publish "$K3SEMU_CLUSTER/server/password" "$_tok"
	publish "$K3SEMU_CLUSTER/server/cahash" "$_hash"
	register "$_name" server "$_conf"
	journal k3s 'level=info msg="k3s is up and running"'
}

# agent_up: the emulated k3s agent joins the server named in config.yaml,
# checking its token against the server's like k3s does.
agent_up() {
	_conf=$ROOT/etc/rancher/k3s/config.yaml
	_srv=$(conf_get server "$_conf" 2>/dev/null)
	_tok=$(conf_get token "$_conf" 2>/dev/null)
	_name=$(conf_get node-name "$_conf" 2>/dev/null)
	if [ -z "$_srv" ] || [ -z "$_tok" ] || [ -z "$_name" ]; then
		journal k3s-agent 'level=fatal msg="config.yaml: server, token and node-name are required"'
		return 1
	fi
	if [ ! -f "$K3SEMU_CLUSTER/server/password" ]; then
		journal k3s-agent "level=error msg=\"failed to get CA certs: Get \\\"$_srv/cacerts\\\": dial tcp: connect: connection refused\""
		return 1
	fi
	_hash=; _pass=$_tok
	case $_tok in K10*) _hash=${_tok#K10}; _hash=${_hash%%::*}; _pass=${_tok#*::}; _pass=${_pass#server:} ;; esac
	_want=$(cat "$K3SEMU_CLUSTER/server/cahash")
	if [ -n "$_hash" ] && [ "$_hash" != "$_want" ]; then
		journal k3s-agent "level=fatal msg=\"Error: token CA hash does not match the Cluster CA certificate hash: $_hash != $_want\""
		return 1
	fi
	if [ "$_pass" != "$(cat "$K3SEMU_CLUSTER/server/password")" ]; then
		journal k3s-agent "level=fatal msg=\"Error: failed to validate connection to cluster at $_srv: 401 Unauthorized\""
		return 1
	fi
	register "$_name" agent "$_conf"
	journal k3s-agent 'level=info msg="k3s agent is up and running"'
}

# tick UNIT: a started unit makes progress each time its status is looked
# at; after K3SEMU_READY_AFTER looks it comes up, or logs why not and keeps
# retrying (systemd's Restart=always).
tick() {
	_st=$(unit_state "$1")
	case $_st in
	activating*)
		_n=${_st#activating }
		if [ "$_n" -gt 1 ] 2>/dev/null; then
			set_state "$1" "activating $((_n - 1))"
			return
		fi
		case $1 in
		k3s) server_up ;;
		k3s-agent) agent_up ;;
		*) true ;;
		esac && set_state "$1" active || set_state "$1" "activating 1"
		;;
	esac
}
