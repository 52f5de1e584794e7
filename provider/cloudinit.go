package provider

import (
	"fmt"
	"strings"
)

// CloudInit renders the #cloud-config user-data that every adapter whose
// cloud takes user-data sends with Create: the host key gpuprov generated for
// the VM (so the core pins it without a trust-on-first-use window) and the
// authorized keys of the login user. The result holds a private key: adapters
// must not log it, and it must never be journaled.
func CloudInit(spec *InstanceSpec) string {
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	if spec.HostKey != nil && spec.HostKey.PrivatePEM != "" {
		b.WriteString("ssh_deletekeys: true\nssh_genkeytypes: []\nssh_keys:\n  ed25519_private: |\n")
		for _, line := range strings.Split(strings.TrimRight(spec.HostKey.PrivatePEM, "\n"), "\n") {
			b.WriteString("    " + line + "\n")
		}
		fmt.Fprintf(&b, "  ed25519_public: %s\n", yamlQuote(spec.HostKey.Public))
	}
	if len(spec.AuthorizedKeys) > 0 {
		b.WriteString("ssh_authorized_keys:\n")
		for _, k := range spec.AuthorizedKeys {
			fmt.Fprintf(&b, "  - %s\n", yamlQuote(k))
		}
	}
	return b.String()
}

// yamlQuote renders s as a double-quoted YAML scalar.
func yamlQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
