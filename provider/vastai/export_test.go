package vastai

// SetMaxListPages lowers p's listing cap (defaultMaxListPages) so that a
// test reaches it with a few pages.
func SetMaxListPages(p *Provider, pages int) { p.maxListPages = pages }
