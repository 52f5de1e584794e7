package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider/sim/simserver"
)

func TestApplyFault(t *testing.T) {
	opts := simserver.DefaultOptions()
	for _, f := range []string{
		`sim-a.stockout_offers=["a-h100x1-use1a"]`,
		`*.error_rate=0.02`,
		`sim-b.listing_lag="3s"`,
	} {
		if err := applyFault(&opts, f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	a, b := opts.Clouds[0].Faults, opts.Clouds[1].Faults
	if !reflect.DeepEqual(a.StockoutOffers, []string{"a-h100x1-use1a"}) || a.ErrorRate != 0.02 || b.ErrorRate != 0.02 ||
		b.ListingLag.Std() != 3*time.Second || len(b.StockoutOffers) != 0 {
		t.Fatalf("faults a %+v b %+v", a, b)
	}
	for _, bad := range []struct{ spec, want string }{
		{"sim-a.no_such_fault=1", "no_such_fault"},
		{"sim-z.error_rate=0.1", `no cloud "sim-z"`},
		{"error_rate=0.1", "CLOUD.KEY=VALUE"},
		{"sim-a.error_rate=lots", "sim-a.error_rate=lots"},
	} {
		err := applyFault(&opts, bad.spec)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want a usage error mentioning %q", bad.spec, err, bad.want)
		}
	}
}
