package gpu

// XidCatalog is NVIDIA's Xid catalog for Ampere and newer GPUs, the source
// of Xids: its "Resolution Bucket (Immediate Action)" column says what an
// Xid asks of the machine.
const XidCatalog = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

// XidKind is what an Xid asks of the machine, after the catalog's
// immediate action.
type XidKind int

const (
	// XidApp is an Xid the catalog answers with RESTART_APP, IGNORE or a
	// workflow that starts with the application: the machine is not
	// suspect on its own. It warns.
	XidApp XidKind = iota
	// XidReset is an Xid the catalog answers with RESET_GPU (or the
	// double-bit ECC and NVLink workflows, which end in a GPU reset): the
	// GPU is not trusted again until it is reset. It fails acceptance.
	XidReset
	// XidReboot is an Xid the catalog answers with RESTART_BM or
	// RESTART_VM: the node needs a reboot (or a drain and service). It
	// fails acceptance.
	XidReboot
)

// String says what the kind asks for, as findings word it.
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
	// Name is the catalog's description.
	Name string
	// Bucket is the catalog's "Resolution Bucket (Immediate Action)".
	Bucket string
	// Kind is what gpuprov makes of Bucket.
	Kind XidKind
}

// Xids is the table the xid check and Health act on, each entry as
// NVIDIA's Xid catalog (XidCatalog) lists it: an Xid of kind XidReset or
// XidReboot fails acceptance and is critical in Health; any other Xid,
// listed or not, is a warning.
var Xids = map[int]XidInfo{
	13:  {"Graphics Engine Exception", "RESTART_APP", XidApp},
	31:  {"GPU memory page fault", "RESTART_APP", XidApp},
	43:  {"GPU stopped processing", "IGNORE", XidApp},
	45:  {"Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45", XidApp},
	46:  {"GPU stopped processing", "RESET_GPU", XidReset},
	48:  {"Double Bit ECC Error", "WORKFLOW_XID_48", XidReset},
	62:  {"Internal micro-controller halt", "RESET_GPU", XidReset},
	63:  {"GPU memory remapping event", "IGNORE", XidApp},
	64:  {"GPU memory remapping failure", "RESET_GPU", XidReset},
	74:  {"NVLINK Error", "WORKFLOW_NVLINK_ERR", XidReset},
	79:  {"GPU has fallen off the bus", "RESTART_BM", XidReboot},
	92:  {"High single-bit ECC error rate", "IGNORE", XidApp},
	94:  {"Contained memory error", "RESTART_APP", XidApp},
	95:  {"Uncontained memory error", "RESET_GPU", XidReset},
	109: {"Context Switch Timeout Error", "RESET_GPU", XidReset},
	110: {"Security Fault Error", "RESET_GPU", XidReset},
	119: {"GSP RPC Timeout", "RESET_GPU", XidReset},
	120: {"GSP Error", "RESET_GPU", XidReset},
	136: {"Link Training Failed", "RESET_GPU", XidReset},
	140: {"ECC Unrecovered Error", "RESET_GPU", XidReset},
	143: {"GPU Initialization Error", "RESET_GPU", XidReset},
	151: {"Key rotation Error", "RESTART_VM", XidReboot},
	155: {"NVLINK: SW Defined Error", "RESET_GPU", XidReset},
	156: {"Resource Retirement Event", "RESET_GPU", XidReset},
	158: {"GPU Fatal Timeout", "RESET_GPU", XidReset},
}

// XidOf returns the table's entry for code, and whether it has one.
func XidOf(code int) (XidInfo, bool) {
	x, ok := Xids[code]
	return x, ok
}
