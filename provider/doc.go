// Package provider is the contract between gpuprov's shared core and one cloud.
//
// A cloud is a package under provider/<id>/ that implements [CloudProvider] and
// registers a [Factory] in its init function, the way database/sql drivers do:
//
//	func init() { provider.Register("mycloud", func(s provider.Settings) (provider.CloudProvider, error) { ... }) }
//
// Callers blank-import the adapters they want and the core builds them with
// [Build]. Everything that is the same for every cloud — failover, retries,
// polling, deadlines, compensation, the journal, SSH — lives in the core; an
// adapter only translates the seven primitives to its cloud's API and
// classifies every failure into an [ErrorKind], which is the failover policy.
//
// # The contract
//
//	method        must                                                    must not
//	Name          the id recorded on every VM row                          -
//	Capabilities  unsupported features, BootTimeout, DeleteTimeout,        claim DiskSize, Labels or
//	              PollInterval, ConsistencyWindow, API rate; DiskSize     CompactPlacement it does
//	              and Labels when Create honours Offer.DiskGB and         not honour
//	              Prepare/Create put InstanceSpec.UserLabels everywhere;
//	              CompactPlacement when it is a PlacementGrouper and
//	              Create honours InstanceSpec.PlacementGroup
//	BindInstallation take the journal's installation id when built with   accept another id than
//	              none (gpuprov.New calls it first); [BindInstallation]     the one it was built with
//	Plan          offers cheapest first; what Create needs in Offer.Detail create anything
//	              VCPUs, MemoryGB and the default DiskGB where known;
//	              InStock only when the cloud's own listing says so
//	Prepare       idempotent per (VM, location): firewall, key, image;     create the instance
//	              the result is private JSON and is journaled
//	Create        one attempt; label everything with the VM identity;      wait for running, or retry
//	              use the cloud's idempotency token where it has one
//	Observe       every non-terminated instance with that identity,       filter out broken instances
//	              normalized status, SSH endpoint once reachable           (report them as Failed)
//	Delete        request deletion; unknown or gone ids are success        wait
//	Cleanup       delete per-VM side resources; idempotent                 touch shared resources
//	Diagnose      (optional, [Diagnoser]) read-only vendor view + findings mutate
//	List          (optional, [Lister]) every instance of this installation mutate
//	EnsurePlacementGroup, DeletePlacementGroup (optional,                  delete another
//	              [PlacementGrouper]) a compact cluster's group per        installation's group;
//	              region, idempotent, labelled; a group in use is          fail on a group that is
//	              ErrInUse                                                 gone
//
// The core filters offers on the request's GPU memory, vCPUs, memory, disk,
// price, spot and regions ([ResourceRequest.Accepts]) whatever Plan returned,
// raises Offer.DiskGB to the request's on providers with DiskSize, and plans
// a request with labels only on providers with Labels.
//
// Long waits belong to the core, which polls Observe at PollInterval. The one
// exception is a bounded wait on a cloud operation whose result carries the
// error (for example a zonal operation that ends in a stockout).
//
// # Errors
//
// Every error an adapter returns from a primitive should be a *[Error] with a
// [ErrorKind]. An error that is not classified counts as [Failed]: the core
// tears the attempt down and moves to the next offer, which is always safe.
// It is never treated as [Transient], which could loop.
package provider
