// Package simserver is the simulated GPU cloud: an HTTP JSON API shaped like
// a GPU marketplace, serving several independent clouds (accounts) from one
// server, each with its own catalog, prices, API key and faults. It is the
// cloud provider/sim talks to, and the one gpuprov's demo, CLI (`gpuprov sim
// serve`), tests, benchmarks and chaos runs use. Every running instance is
// a real SSH server on loopback whose commands run in a sandbox folder, so
// SSH and bootstrap steps run for real. docs/clouds/sim.md describes it as a
// cloud.
//
// In a test, NewServer starts one in the manner of net/http/httptest and
// closes it when the test ends:
//
//	srv := simserver.NewServer(t, simserver.WithTiming(simserver.Timing{})) // sim-a, sim-b; instant
//	p, err := sim.New(sim.Config{Endpoint: srv.URL(), Cloud: "sim-a", APIKey: srv.APIKey("sim-a")},
//		sim.WithName("sim-a"))
//	if err != nil { t.Fatal(err) }
//	prov, err := gpuprov.New(j, gpuprov.WithProvider(p)) // j: a journal.Journal
//	if err != nil { t.Fatal(err) }
//	defer prov.Close()
//	vm, err := prov.Launch(ctx, gpuprov.Request{Name: "train-1", GPU: "h100"})
//	insts, _ := srv.Instances("sim-a") // the admin view: one instance, running
//
// Faults are the knobs a test turns: WithFaults at start, or at any time
//
//	srv.SetFaults("sim-a", simserver.Faults{StockoutOffers: []string{"*"}}) // fail over to sim-b
//
// and Instances, Instance, SideResources, Stats and Preempt are the admin
// view of what the cloud holds. Programs that are not tests call Start
// (and Close); Start(DefaultOptions()) is what NewServer starts from. Only
// loopback is ever bound: Start refuses any other address.
//
// # API
//
// Every cloud lives under /clouds/{cloud}/v1/ and every call needs the
// header "Authorization: Bearer <key>" of that cloud (Server.APIKey).
// Bodies are JSON; unknown fields in a request body are an invalid_request.
//
//	GET    offers[?region=&gpu=]            {"offers":[Offer...], "reservations":[...]}: id, region, zone,
//	                                        instance_type, gpu (canonical), gpu_count, gpu_memory_gb,
//	                                        vcpus, memory_gb, price_per_hour, spot, availability (a
//	                                        hint); and the account's reservations, as GET reservations
//	                                        lists them (every region), so a plan costs one call
//	GET    reservations[?region=]           {"reservations":[...]}: id, offer_id, count, targeted,
//	                                        ends_at, and region, zone, instance_type, gpu, gpu_count of
//	                                        its offer, in_use (instances not terminated in it), state
//	                                        "active" or "ended" (CloudConfig.Reservations)
//	GET    block-offerings[?duration=&count=&start_before=&region=]
//	                                        {"block_offerings":[...]}: id, offer_id, region, zone,
//	                                        instance_type, gpu, gpu_count, count, start, end,
//	                                        upfront_fee, reclaims; those not sold, starting from now
//	                                        (CloudConfig.BlockOfferings)
//	POST   block-purchases                  body {offering_id, labels}: 201 and the reservation it became
//	                                        (targeted, "cb-" id, starts_at, ends_at, reclaims, labels);
//	                                        409 out_of_capacity once sold; GET reservations?label=k=v
//	                                        finds it by its labels
//	GET    quotas[?region=]                 {"quotas":[...]}: region, gpu (empty: every model), limit,
//	                                        name ("gpus" or "gpus-<GPU>"), unit "gpus", usage (GPUs of
//	                                        instances not terminated and not reserved) (CloudConfig.Quotas)
//	POST   instances                        body {offer_id, name, labels, user_data, idempotency_token,
//	                                        ssh_user, ssh_key, firewall, disk_gb, placement_group}:
//	                                        201 and the Instance; 400 when placement_group is
//	                                        unknown or holds live instances in another zone;
//	                                        200 and the existing Instance when the idempotency
//	                                        token was seen (unless the cloud ignores tokens);
//	                                        reservation_id launches into that reservation, which must
//	                                        hold offer_id (400 otherwise): 409 reservation_full when
//	                                        every slot is in use, 409 reservation_ended after its end;
//	                                        it draws on no quota and no stock
//	GET    instances[?label=k=v&label=...&label_any=k=v&label_any=...&region=&zone=
//	       &include_terminated=true&limit=&cursor=]
//	                                        {"instances":[...], "next_cursor":"..."}: sorted by id,
//	                                        limit 1..500 (default 100); pass next_cursor back as
//	                                        cursor for the next page; terminated instances only with
//	                                        include_terminated; new instances are hidden for
//	                                        Faults.ListingLag. label: the label k is v (an empty v:
//	                                        k is absent or empty), for every one given; label_any:
//	                                        the label k is one of the values given for k, for every
//	                                        such k (so label_any=gpuprov=a&label_any=gpuprov=b lists
//	                                        a's and b's instances). Label filters are answered from
//	                                        an index: a filtered listing costs what it selects
//	GET    instances/{id}                   the Instance, terminated ones too for Options.Retention
//	DELETE instances/{id}                   202 and the Instance, now "stopping" (idempotent);
//	                                        404 for an unknown id
//	PUT    firewalls/{name}?region=r        body {ports:[{number,protocol,peers}], sources:[CIDR],
//	                                        labels}: 201 created, 200 updated (idempotent); the
//	                                        ports are open to sources (default 0.0.0.0/0) and,
//	                                        where peers is true, to the instances using the
//	                                        firewall (Firewall.Admits); recorded, not enforced
//	DELETE firewalls/{name}?region=r        204; 404 unknown; 409 conflict while an instance that
//	                                        is not terminated uses it
//	GET    firewalls[?region=r]             {"firewalls":[...]}
//	PUT    ssh-keys/{name}                  body {public_keys:[authorized_keys lines], labels}: 201/200
//	DELETE ssh-keys/{name}                  204; 404 unknown
//	GET    ssh-keys                         {"ssh_keys":[...]}
//	PUT    placement-groups/{name}?region=r body {labels}: 201 created, 200 updated (idempotent)
//	DELETE placement-groups/{name}?region=r 204; 404 unknown; 409 conflict while an instance
//	                                        that is not terminated uses it
//	GET    placement-groups[?region=r]      {"placement_groups":[...]}
//	POST   volumes                          body {name, zone, size_gb, labels, idempotency_token}:
//	                                        201 and the Volume, "creating" for Timing.VolumeTime,
//	                                        then "available"; 200 and the existing Volume when the
//	                                        token was seen; 409 conflict when the zone holds a volume
//	                                        of that name (another token); 400 for a size_gb outside
//	                                        1..16384 or an unknown zone (one of the catalog's);
//	                                        409 out_of_capacity under Faults.VolumeStockoutZones
//	GET    volumes[?label=k=v&label_any=k=v&region=&zone=&name=]
//	                                        {"volumes":[...]}, sorted by id; label filters as
//	                                        GET instances'
//	GET    volumes/{id}                     the Volume; 404 for an unknown id
//	POST   volumes/{id}/attach              body {instance_id}: 200 and the Volume, "attached", with
//	                                        attached_to and device (the path the instance's sandbox
//	                                        sees it at); 200 when attached to that instance already;
//	                                        400 when the instance is unknown, not running, or in
//	                                        another zone (the message names both zones); 409
//	                                        volume_in_use when attached to another instance, 409
//	                                        conflict while that instance is being deleted or while the
//	                                        volume is creating
//	POST   volumes/{id}/detach              body {instance_id}: 200 and the Volume, "available"
//	                                        (idempotent); 409 volume_in_use when attached to another
//	                                        instance than instance_id
//	DELETE volumes/{id}                     204; 404 unknown; 409 volume_in_use while attached (409
//	                                        conflict while its instance is being deleted)
//
// A Volume carries id, name, labels, region, zone, size_gb, status
// (creating, available, attached), attached_to and device while attached,
// created_at and updated_at. Volumes are zonal: names are unique in a
// zone, and a volume attaches to a running instance of its zone, one at a
// time. An instance that terminates (deleted, preempted) detaches its
// volumes, which stay, available; until it has terminated they stay
// attached to it. A volume's data is the folder
// <state-dir>/volumes/<cloud>/<id> (Server.VolumeDir), which outlives
// instances and a server restart and is removed by DELETE. While attached,
// the instance's sandbox sees it as the device <sandbox>/.sim-dev/<id> (a
// link to that folder), on which the sandbox's emulated blkid, mkfs.ext4,
// mount, umount, findmnt and mountpoint work (docs/clouds/sim.md
// "Volumes" says what they emulate): files written under a mount on one
// instance are read under a mount on the next.
//
// An Instance carries id, name, labels, offer_id and the offer's fields,
// status, status_message, ssh {host, port, user} while it runs with SSH
// (with Options.DisableSSH: 127.0.0.1:DisabledSSHPort, where nothing listens),
// public_ip (127.0.0.1), host_key (public), created_at, updated_at,
// terminated_at and events, its history ({at, type, message} with types
// created, booting, running, boot_failed, delete_requested, preempted,
// terminated) that stays readable after termination, so a reclaim or a
// boot failure can be diagnosed.
//
// Statuses: provisioning → booting → running, or failed when the boot
// fails; delete turns any of them stopping, then terminated; a preempted
// instance reports preempted, then terminated. Boot takes Timing.BootTime ±
// BootJitter (a third of it provisioning), a delete Timing.DeleteTime plus
// Faults.SlowDelete.
//
// User-data is read as cloud-init would: from a "#cloud-config" document,
// ssh_keys.ed25519_private becomes the instance's SSH host key (else one is
// generated) and ssh_authorized_keys, with the keys of the ssh_key resource
// the create names, may log in, as any user name. The SSH server starts
// when the instance turns running, in a sandbox folder under the state
// folder (Server.SandboxDir: <state-dir>/<cloud>/<instance-id>, the state
// dir being Options.StateDir, else Options.StateFile + ".d", else a
// temporary folder) whose bin/ is first on PATH, and stops when the
// instance is deleted, preempted or fails. Commands run with `sh -c` in
// that folder (also HOME), as the server process's own OS user, whatever
// the login name; Options.SandboxEnv is added to their environment. The
// k3s emulation (package k3semu) installs its tools there; its package
// comment says where k3s and its kubeconfig are and how to run kubectl.
//
// # Errors
//
// Errors are {"error":{"code":"...","message":"..."}} with these codes:
//
//	400 invalid_request     malformed body, unknown offer, missing key, bad cloud-config,
//	                        a firewall source that is not a CIDR
//	400 unknown_firewall    a create naming a firewall the region does not have
//	401 unauthorized        missing or wrong API key (or admin token)
//	402 insufficient_funds  the account cannot pay (Faults.InsufficientFunds)
//	403 quota_exceeded      region quota (Faults.QuotaRegions, Faults.InstanceQuota,
//	                        CloudConfig.Quotas)
//	404 not_found           unknown cloud, instance, firewall, key or route
//	409 out_of_capacity     stockout (Faults.StockoutOffers, StockoutRegions, OfferStock)
//	409 conflict            a firewall or placement group still in use; admin: preempting an instance that is not running;
//	                        a volume name taken in the zone; a volume creating, or attached to an instance being deleted
//	409 volume_in_use       a volume attached to another instance (attach, detach, delete)
//	409 reservation_full    a create into a reservation whose every slot is in use
//	409 reservation_ended   a create into a reservation past its end
//	409 reservation_not_started a create into a bought block before its start
//	429 rate_limited        token bucket empty or injected throttling; Retry-After header in seconds
//	500 internal            injected error, or a create whose response was lost (it landed)
//	503 unavailable         injected error, or the server is shutting down
//	504 timeout             a request held by a timeout fault (the client has usually given up)
//
// A create with a lost response may also end with the connection closed and
// no answer at all (LostCreateMode "drop").
//
// # Faults
//
// Faults are set per cloud in CloudConfig.Faults (WithFaults) at start, and at run time
// with Server.SetFaults or PUT /admin/clouds/{cloud}/faults. See Faults for
// each knob: stockouts and quota by offer or region, insufficient funds,
// injected 429/5xx/timeouts (optionally only for some call kinds), lost
// create responses, boot failures (by probability, offer or region), slow
// delete, listing lag, preemption (by probability, or on demand with
// Server.Preempt or POST /admin/clouds/{cloud}/instances/{id}/preempt) and a
// per-account token bucket. CloudConfig.IgnoreIdempotencyToken makes a cloud
// ignore idempotency tokens. Probabilities draw from a math/rand generator
// seeded with Options.Seed, so runs with the same calls are reproducible.
//
// # Admin API
//
// Authenticated with "Authorization: Bearer <Server.AdminToken>":
//
//	GET  /admin/clouds                                 [{name, api_key, url}]
//	GET  /admin/clouds/{cloud}/faults                  the Faults in force
//	PUT  /admin/clouds/{cloud}/faults                  replace them (body: Faults)
//	GET  /admin/clouds/{cloud}/instances               every instance, terminated ones included
//	GET  /admin/clouds/{cloud}/volumes                 every volume (Server.Volumes)
//	POST /admin/clouds/{cloud}/instances/{id}/preempt  preempt a running instance now, or with
//	                                                   ?notice=30s announce it and preempt it then
//
// # Metadata
//
// Without a key, as an instance reads its cloud's metadata server (its
// commands find the URL in GPUPROV_SIM_METADATA):
//
//	GET  /metadata/{cloud}/{id}/interruption           200 {"action":"terminate","time":...} while a
//	                                                   preemption is announced (Faults.PreemptNotice,
//	                                                   Server.PreemptIn); 404 otherwise
//	GET  /admin/clouds/{cloud}/resources               firewalls (ports, peers, sources) and SSH keys
//	GET  /admin/clouds/{cloud}/stats                   Stats
//
// # Time and state
//
// Options.Clock (a github.com/org/gpuprov/clock.Clock; WithClock in tests)
// drives every latency, boot, delete, lag
// and retention, so tests advance a fake clock instead of sleeping; reads
// apply the transitions that are due at once. With Options.StateFile the
// whole state is rewritten atomically (temp file, fsync, rename, mode 0600)
// after every mutation and loaded at start, so a server process outlives
// its clients and survives its own restart: running instances get new SSH
// servers (new ports) with the same host keys. The file therefore holds
// the instances' private host keys, the API keys and the admin token, which
// is acceptable for a simulator and is why it is 0600. Faults are not
// persisted: a restarted server injects the configured ones.
package simserver
