package metrics

import (
	"sync"
	"unicode/utf8"

	"github.com/org/gpuprov"
)

// MaxProviders bounds the distinct provider label values a Collector
// exports; the values after the first MaxProviders are reported as Other. A
// Provisioner has as many providers as its configuration names, far fewer.
const MaxProviders = 64

// Other is the label value that stands for any value outside a label's
// bounded set.
const Other = "other"

// None is the error_type of what did not fail (a ready launch, a call that
// succeeded): a label value is never empty.
const None = "none"

// class is the set a label's values are drawn from.
type class uint8

const (
	fixed     class = iota // set by this package (outcome): trusted
	providerC              // a provider id: admitted up to MaxProviders
	kindC                  // a gpuprov.ErrorKinds name, or "" (reported as None)
	opC                    // a gpuprov.Call op
	stateC                 // a live VM state
	scopeC                 // a block scope
)

// opNames are the primitive ops a gpuprov.Call names; any other is
// reported as Other.
var opNames = []string{"plan", "prepare", "create", "observe", "list", "delete", "cleanup", "cleanup-shared", "diagnose", "placement-group"}

var (
	kinds  = setOf(gpuprov.ErrorKinds()...)
	ops    = setOf(opNames...)
	states = setOf(string(gpuprov.StatePending), string(gpuprov.StateProvisioning), string(gpuprov.StateWaiting),
		string(gpuprov.StateReady), string(gpuprov.StateDeleting))
	scopes = setOf("offer", "zone", "region", "provider", "spot", "family")
)

func setOf(vs ...string) map[string]bool {
	m := make(map[string]bool, len(vs))
	for _, v := range vs {
		m[v] = true
	}
	return m
}

// bounds admits provider ids up to a bound; it is shared by every metric of
// a Collector, so a provider counts once whatever metric saw it first.
type bounds struct {
	mu        sync.Mutex
	max       int
	providers map[string]bool
}

// clean returns v as a label value of class c, and whether that is v
// itself.
func (b *bounds) clean(c class, v string) (string, bool) {
	ok := true
	switch c {
	case providerC:
		ok = v == "" || b.admit(v)
	case kindC:
		if v == "" {
			return None, true
		}
		ok = kinds[v]
	case opC:
		ok = ops[v]
	case stateC:
		ok = states[v]
	case scopeC:
		ok = scopes[v]
	}
	if !ok {
		return Other, false
	}
	return v, true
}

func (b *bounds) admit(p string) bool {
	if !utf8.ValidString(p) || p == Other {
		return false // WithLabelValues panics on invalid UTF-8
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.providers[p] {
		return true
	}
	if len(b.providers) >= b.max {
		return false
	}
	b.providers[p] = true
	return true
}

// key is up to three raw label values.
type key [3]string

// cached holds the children of a metric vector by their raw label values,
// so that the hot path is one map read under a read lock: no allocation,
// no hashing of label values by the vector. Only children whose raw values
// are their label values are cached, so the cache is as bounded as the
// labels are.
type cached[M any] struct {
	b       *bounds
	classes []class
	child   func(lvs ...string) M // a vector's WithLabelValues

	mu sync.RWMutex
	m  map[key]M
}

func newCached[M any](b *bounds, child func(...string) M, classes ...class) *cached[M] {
	return &cached[M]{b: b, classes: classes, child: child, m: map[key]M{}}
}

// with returns the child for the raw label values k.
func (c *cached[M]) with(k key) M {
	c.mu.RLock()
	m, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return m
	}
	lvs := make([]string, len(c.classes))
	same := true
	for i, cl := range c.classes {
		var ok bool
		lvs[i], ok = c.b.clean(cl, k[i])
		same = same && ok
	}
	m = c.child(lvs...)
	if same {
		c.mu.Lock()
		c.m[k] = m
		c.mu.Unlock()
	}
	return m
}
