// Command gencatalog refreshes the GCP adapter's embedded catalog.json from
// the Cloud Billing Catalog API: it lists every SKU of Compute Engine
// (services/6F81-5844-456A/skus, all pages), reprices each shape and region
// of the existing catalog from them, and rewrites the file with today's
// date. It needs Application Default Credentials with the Cloud Billing
// API enabled; it is run by `go generate ./provider/gcp` and never by the
// tests. Shapes and zones are kept from the existing file (the billing
// catalog knows regions, not zones); a region it cannot price is dropped
// and reported on stderr.
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
	"time"

	"golang.org/x/oauth2/google"

	"github.com/org/gpuprov/provider/gcp/internal/catalog"
)

const billingBase = "https://cloudbilling.googleapis.com/v1/services/" + catalog.ComputeEngineService + "/skus"

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
	hc, err := google.DefaultClient(ctx, "https://www.googleapis.com/auth/cloud-billing.readonly")
	if err != nil {
		return fmt.Errorf("application default credentials: %w", err)
	}
	skus, err := listSKUs(ctx, hc)
	if err != nil {
		return err
	}
	pb, err := catalog.NewPriceBook(skus)
	if err != nil {
		return err
	}
	today := time.Now().UTC().Format("2006-01-02")
	out, warnings := catalog.Reprice(cat, pb, "Cloud Billing Catalog API, services/"+catalog.ComputeEngineService+"/skus (list prices, USD)", today)
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

// listSKUs pages through services.skus.list.
func listSKUs(ctx context.Context, hc *http.Client) ([]catalog.SKU, error) {
	var all []catalog.SKU
	token := ""
	for {
		q := url.Values{"pageSize": {"5000"}, "currencyCode": {"USD"}}
		if token != "" {
			q.Set("pageToken", token)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, billingBase+"?"+q.Encode(), nil)
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
			return nil, fmt.Errorf("skus.list: HTTP %d: %.300s", resp.StatusCode, body)
		}
		page, err := catalog.ParseSKUPage(body)
		if err != nil {
			return nil, err
		}
		all = append(all, page.SKUs...)
		if page.NextPageToken == "" {
			return all, nil
		}
		token = page.NextPageToken
	}
}
