package azure

// WithCatalog is withCatalog for the external test package: it replaces
// the embedded catalog, so that a test sets the prices it plans by.
var WithCatalog = withCatalog

// The documented answers of errors_test.go, for the mock's faults.
const (
	ThrottledBody      = throttled429
	PolicySizeBody     = policySize
	PolicyLocationBody = policyLocation
)
