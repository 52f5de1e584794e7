package vastai

import (
	"fmt"
	"strings"

	"github.com/org/gpuprov/provider"
)

// MaxOnstart is the longest onstart script Vast takes ("limited to 4048
// characters", the Key Quirks of Vast's OpenAPI document).
const MaxOnstart = 4048

// onstart renders the script the instance runs when it starts, Vast's
// stand-in for cloud-init: it appends the authorized keys to root's
// authorized_keys and, when the provider injects host keys and spec has
// one, replaces sshd's ed25519 host key with it and has sshd reload. The
// script holds the host key's private half: it must not be logged or
// journaled. Values go in quoted here-documents, so the shell expands
// nothing in them.
func onstart(spec *provider.InstanceSpec, injectHostKey bool) (string, error) {
	var b strings.Builder
	b.WriteString("umask 077; mkdir -p /root/.ssh\n")
	b.WriteString("cat >> /root/.ssh/authorized_keys <<'GPUPROV_KEYS'\n")
	for _, k := range spec.AuthorizedKeys {
		k = strings.TrimSpace(k)
		if strings.ContainsAny(k, "\r\n") || strings.Contains(k, "GPUPROV_") {
			return "", fmt.Errorf("authorized key %.20q… is not one authorized_keys line", k)
		}
		b.WriteString(k + "\n")
	}
	b.WriteString("GPUPROV_KEYS\nchmod 600 /root/.ssh/authorized_keys\n")
	if hk := spec.HostKey; injectHostKey && hk != nil && hk.PrivatePEM != "" {
		if strings.Contains(hk.PrivatePEM, "GPUPROV_") || strings.ContainsAny(hk.Public, "\r\n'") {
			return "", fmt.Errorf("the host key cannot be written by the onstart script")
		}
		b.WriteString("cat > /etc/ssh/ssh_host_ed25519_key <<'GPUPROV_HOSTKEY'\n")
		b.WriteString(strings.TrimRight(hk.PrivatePEM, "\n") + "\nGPUPROV_HOSTKEY\n")
		fmt.Fprintf(&b, "printf '%%s\\n' '%s' > /etc/ssh/ssh_host_ed25519_key.pub\n", hk.Public)
		b.WriteString("pkill -HUP -x sshd || true\n")
	}
	if b.Len() > MaxOnstart {
		return "", fmt.Errorf("the onstart script would be %d characters; Vast takes at most %d (fewer authorized keys)", b.Len(), MaxOnstart)
	}
	return b.String(), nil
}
