package gpu

// XidCatalog is the NVIDIA Xid catalog's source.
const XidCatalog = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

// XidKind is what an Xid asks of the machine.
type XidKind int

const (
	// XidApp: the application's fault or a transient one; the machine is
	// fine (restart the application). A warning.
	XidApp XidKind = iota
	// XidReset: the GPU needs a reset before it is trusted again.
	XidReset
	// XidReboot: the node needs a reboot (or a drain and service).
	XidReboot
)

func (k XidKind) String() string {
	switch k {
	case XidReset:
		return "reset the GPU"
	case XidReboot:
		return "reboot or drain the node"
	}
	return "restart the application"
}

// XidInfo is an Xid's entry in the table gpuprov acts on.
type XidInfo struct {
	Name string
	Kind XidKind
}

// Xids is the table the xid check and Health act on, after NVIDIA's Xid
// catalog (XidCatalog, "Resolution Bucket (Immediate Action)" and the
// Xid descriptions): an Xid of kind XidReset or XidReboot fails
// acceptance and is critical in Health; an Xid not listed is a warning.
var Xids = map[int]XidInfo{
	31:  {"GPU memory page fault", XidApp},
	43:  {"GPU stopped processing", XidApp},
	45:  {"preemptive cleanup, due to a previous error", XidApp},
	46:  {"GPU stopped processing", XidReset},
	48:  {"double bit ECC error", XidReset},
	61:  {"internal micro-controller breakpoint/warning", XidReset},
	62:  {"internal micro-controller halt", XidReset},
	63:  {"ECC page retirement or row remapping recording event (reset the GPU to apply)", XidReset},
	64:  {"ECC page retirement or row remapper recording failure", XidReset},
	74:  {"NVLink error", XidReset},
	79:  {"GPU has fallen off the bus", XidReboot},
	92:  {"high single-bit ECC error rate", XidApp},
	94:  {"contained ECC error", XidReset},
	95:  {"uncontained ECC error", XidReset},
	119: {"GSP RPC timeout", XidReset},
	120: {"GSP error", XidReset},
	140: {"unrecovered ECC error", XidReset},
}

// XidOf returns the table's entry for code, and whether it has one.
func XidOf(code int) (XidInfo, bool) {
	x, ok := Xids[code]
	return x, ok
}
