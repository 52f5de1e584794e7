package azure

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
)

// wait polls a long-running operation until it ends, OperationTimeout
// passes (on the provider's clock) or ctx ends. It polls the operation's
// own status URL (Azure-AsyncOperation, else Location) at once, then after
// the Retry-After the status answer asks for (PollInterval without one),
// each poll one call bounded by RequestTimeout. done is false when the
// bound ran out with the operation still running. When done, err is the
// operation's own failure (an *azcore.ResponseError whose code is the
// status document's error.code), and res is the final resource. A poll
// that fails returns its error with done false.
func wait[T any](ctx context.Context, p *Provider, poller *runtime.Poller[T]) (res T, done bool, err error) {
	deadline := p.clock.Now().Add(p.cfg.OperationTimeout)
	for !poller.Done() {
		cctx, cancel := p.call(ctx)
		resp, err := poller.Poll(cctx)
		cancel()
		if err != nil {
			return res, false, err
		}
		if poller.Done() {
			break
		}
		left := deadline.Sub(p.clock.Now())
		if left <= 0 {
			return res, false, nil
		}
		d := p.cfg.PollInterval
		if resp != nil {
			if ra := retryAfter(resp.Header.Get("Retry-After")); ra > 0 {
				d = ra
			}
		}
		if err := p.clock.Sleep(ctx, min(d, left)); err != nil {
			return res, false, err
		}
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	res, err = poller.Result(cctx)
	return res, true, err
}
