// Package gpuprov gets GPU machines from many clouds and makes them usable.
//
// A caller says what it needs — "1 × H100, under $3/h, any cloud, within 20
// minutes" — and a [Provisioner] plans offers across every configured
// provider, cheapest first, tries them in order, fails over on stockouts and
// quota, retries what is transient, tears down whatever a failed attempt
// started, and journals every step before it touches the cloud, so that a
// crash of the calling process leaks nothing and duplicates nothing:
// [Provisioner.Recover] in the next process finds, adopts or tears down
// whatever the cloud holds.
//
//	j, _ := journal.Open(ctx, "sqlite:/var/lib/gpuprov/journal.db")
//	p, _ := gpuprov.New(j, gpuprov.WithSSHKey(signer),
//		gpuprov.WithRegistryProvider("aws", provider.Settings{Config: aws.Config{Regions: []string{"us-east-1"}}}))
//	vm, err := p.Launch(ctx, gpuprov.Request{Name: "train-1", GPU: "H100", MaxPricePerHour: 3})
//
// Clouds are packages under provider/ that register themselves at init, and
// journal backends are packages under journal/; import the ones you use for
// their side effect, like database/sql drivers.
//
// # One VM's life
//
//	pending → provisioning(attempt k: prepare → create → boot → connect → bootstrap [→ join]) → ready
//	                       ↘ on error: teardown attempt k, block, attempt k+1 …   ↘ no offers / abort → failed
//	ready → deleting → deleted
//
// Each arrow is a durable journal write made before the cloud is touched.
// The error kind a provider returns decides what happens next (see
// provider.ErrorKind). Every transition is an [Event], journaled and handed
// to the sinks given with [WithEvents].
//
// # Deadlines and teardown
//
// The caller's context and Request.Timeout bound a launch; each wait is also
// bounded by its own budget (the provider's BootTimeout, the connect and
// bootstrap timeouts). Teardown never runs on the caller's context: it uses
// a detached one bounded by the provider's DeleteTimeout, so Ctrl-C and an
// expired deadline still clean up. A teardown first sends Delete for every
// instance id the journal knows, whatever the cloud's listing says (deleting
// an unknown id is success), so a read API that is down or a listing that
// lags never keeps a known instance alive; it then looks, with a listing
// taken during the teardown, to confirm and to find what the journal does not
// know, backing off on consecutive failures only. A teardown that cannot
// finish leaves the VM in state deleting with its error, never in a state
// that hides a live instance; Delete, Recover and Sweep finish it later.
package gpuprov
