# gpuprov sim: the library of the emulated block-device tools (blkid,
# mkfs.ext4, mount, umount, findmnt, mountpoint), sourced by each of them.
# The sandbox root R is the folder above the scripts' bin. An attached
# volume is the device R/.sim-dev/<id>, a link to the volume's folder on
# the server (size_gb; once formatted, superblock and fs/); the mount
# table is R/.sim-vol/mounts, one line a mount: real target, source,
# fstype, options, target as the caller named it (tab-separated).
R=$(cd "$(dirname "$0")/.." && pwd -P)
MOUNTS="$R/.sim-vol/mounts"
TAB=$(printf '\t')

# sim_path P: P as a path of the sandbox, made absolute from the current
# folder; an absolute path outside the sandbox is taken under it (/mnt/x
# is R/mnt/x). Its parent is resolved, the last part is not, so a mount
# point (a link once mounted) stays itself. Sets SHOWN to the absolute
# path before the mapping.
sim_path() {
	p=$1
	case $p in
	/*) ;;
	*) p="$(pwd -P)/$p" ;;
	esac
	while [ "${p%/}" != "$p" ] && [ "$p" != / ]; do p=${p%/}; done
	SHOWN=$p
	case $p in
	"$R" | "$R"/*) ;;
	*) p="$R$p" ;;
	esac
	b=${p##*/}
	d=${p%/*}
	[ -n "$d" ] || d=/
	case $b in
	. | ..) d=$p b= ;;
	esac
	if dd=$(cd "$d" 2>/dev/null && pwd -P); then
		p=${dd%/}${b:+/$b}
	fi
	printf '%s\n' "$p"
}

# is_device D: D (a sandbox path) is an attached volume.
is_device() { [ -f "$1/size_gb" ]; }

# sb_get D KEY: the value of KEY in device D's superblock.
sb_get() { sed -n "s/^$2=//p" "$1/superblock" 2>/dev/null; }

# mounts_of FIELD VALUE: the mount-table lines whose FIELD (1 target, 2
# source) is VALUE.
mounts_of() {
	[ -f "$MOUNTS" ] || return 0
	awk -F "$TAB" -v f="$1" -v v="$2" '$f == v' "$MOUNTS"
}
