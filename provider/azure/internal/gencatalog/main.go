// Command gencatalog refreshes the Azure adapter's embedded catalog.json
// from the public Azure Retail Prices API
// (https://prices.azure.com/api/retail/prices, no authentication): for
// every size of the existing catalog it pages through the Consumption
// meters of that size, keeps the Linux pay-as-you-go and Spot hourly USD
// prices per region, and rewrites the file with today's date. Shapes
// (vCPUs, memory, GPUs) are kept from the existing file: the price list
// does not carry them. A size the API does not price keeps its old regions
// and is reported on stderr. It is run by `go generate ./provider/azure`
// and never by the tests.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/org/gpuprov/provider/azure/internal/catalog"
)

func main() {
	path := flag.String("catalog", "catalog.json", "the catalog file to reprice in place")
	flag.Parse()
	if err := run(*path); err != nil {
		fmt.Fprintln(os.Stderr, "gencatalog:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	cat, err := catalog.Parse(old)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: time.Minute}
	prices := map[string]catalog.Prices{}
	for _, s := range cat.Sizes {
		items, err := listItems(ctx, hc, s.Name)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		prices[s.Name] = catalog.LinuxPrices(s.Name, items)
	}
	today := time.Now().UTC().Format("2006-01-02")
	out, warnings := catalog.Reprice(cat, prices, "Azure Retail Prices API "+catalog.RetailEndpoint+
		"?api-version="+catalog.RetailAPIVersion+" (priceType Consumption, USD, Linux meters; Spot = the size's \"... Spot\" meter)", today)
	for _, w := range warnings {
		fmt.Fprintln(os.Stderr, "gencatalog: warning:", w)
	}
	if err := out.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// listItems pages through the meters of one size, following NextPageLink
// (the API returns 100 items a page). Only links back to the API's own
// host are followed.
func listItems(ctx context.Context, hc *http.Client, size string) ([]catalog.RetailItem, error) {
	q := url.Values{"api-version": {catalog.RetailAPIVersion}, "currencyCode": {"USD"}, "$filter": {catalog.RetailFilter(size)}}
	next := catalog.RetailEndpoint + "?" + q.Encode()
	var all []catalog.RetailItem
	for pages := 0; next != ""; pages++ {
		if pages >= 50 {
			return nil, fmt.Errorf("more than %d pages", pages)
		}
		if u, err := url.Parse(next); err != nil || !strings.HasSuffix(u.Hostname(), "prices.azure.com") {
			return nil, fmt.Errorf("next page link %q does not point at the Retail Prices API", next)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, next, nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, body)
		}
		page, err := catalog.ParseRetailPage(body)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		next = page.NextPageLink
	}
	return all, nil
}
