package gpuprov

import (
	"context"
	"time"

	"github.com/org/gpuprov/journal"
)

// Replicas on one journal share each cloud account's API rate. A journal
// that several processes share (journal.Members: PostgreSQL, and SQLite for
// processes on one host) keeps a row per live process with the accounts it
// paces; every process beats every memberBeat, learns how many live
// processes pace each of its accounts, and paces its share: the account's
// rate and burst divided by that count (at least one request of burst). A
// process that dies stops beating, and the others take its share back one
// lease TTL later. Replicas share an account when they configure it under
// the same provider name.
//
// The split is even, not by demand: a replica with nothing to send leaves
// its share unused, so replicas that split the work evenly (the fleet's
// slots, a scheduler's queue) get the account's whole rate between them.

// memberBeat is how often a process tells the others it still paces its
// accounts. A new replica takes its share within one beat of the others.
const memberBeat = time.Second

// pacedAccounts returns the names of the providers whose rate this process
// paces.
func (p *Provisioner) pacedAccounts() []string {
	var names []string
	for _, name := range p.Providers() {
		if p.providers[name].pc != nil {
			names = append(names, name)
		}
	}
	return names
}

// beat says this process paces accounts and sets each pacer's share from
// the answer.
func (p *Provisioner) beat(m journal.Members, accounts []string) {
	ctx, cancel := context.WithTimeout(context.Background(), journalWait)
	defer cancel()
	now := p.clock.Now()
	live, err := m.Beat(ctx, p.owner, accounts, now, now.Add(p.leaseTTL))
	if err != nil {
		// The shares stay as they were: the others still count this
		// process until its row expires.
		p.log.Warn("sharing the accounts' rate with other replicas", "err", err)
		return
	}
	for _, name := range accounts {
		p.providers[name].pc.setShare(live[name])
	}
}

// shareRates beats until stop is closed, then leaves, so that the others
// take this process's share back at once.
func (p *Provisioner) shareRates(m journal.Members, accounts []string, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		t := p.clock.NewTimer(memberBeat)
		select {
		case <-stop:
			t.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), journalWait)
			if err := m.Leave(ctx, p.owner); err != nil {
				p.log.Warn("leaving the replicas that share the accounts' rate", "err", err)
			}
			cancel()
			return
		case <-t.C():
		}
		p.beat(m, accounts)
	}
}
