package azure

// WithCatalog is withCatalog for the external test package: it replaces
// the embedded catalog, so that a test sets the prices it plans by.
var WithCatalog = withCatalog
