package simserver

// label is one key=value pair of an instance's labels.
type label struct{ key, value string }

// index adds in to c's label index. Labels are set at create and never
// change, so an instance is indexed once, when it is created or loaded.
func (c *cloud) index(in *instance) {
	for k, v := range in.Labels {
		l := label{k, v}
		ids := c.byLabel[l]
		if ids == nil {
			ids = map[string]struct{}{}
			c.byLabel[l] = ids
		}
		ids[in.ID] = struct{}{}
	}
}

// unindex removes in from c's label index.
func (c *cloud) unindex(in *instance) {
	for k, v := range in.Labels {
		l := label{k, v}
		delete(c.byLabel[l], in.ID)
		if len(c.byLabel[l]) == 0 {
			delete(c.byLabel, l)
		}
	}
}

// candidates returns the ids of the instances that may match a listing's
// label filters (want: key=value; anyOf: key=one of the values, which are
// distinct): those of the filter that selects the fewest; the listing
// checks every filter on each. all says no filter can use the index (there
// is none, or each accepts an empty value, which an instance without the
// key matches too): every instance is a candidate, and ids is nil. So a
// listing of a few VMs costs what they hold, not what the cloud holds.
func (c *cloud) candidates(want map[string]string, anyOf map[string][]string) (ids []string, all bool) {
	var best []map[string]struct{}
	bestN := -1
	consider := func(k string, vs ...string) {
		var sets []map[string]struct{}
		n := 0
		for _, v := range vs {
			if v == "" {
				return
			}
			s := c.byLabel[label{k, v}]
			sets, n = append(sets, s), n+len(s)
		}
		if bestN < 0 || n < bestN {
			best, bestN = sets, n
		}
	}
	for k, v := range want {
		consider(k, v)
	}
	for k, vs := range anyOf {
		consider(k, vs...)
	}
	if bestN < 0 {
		return nil, true
	}
	// One value per key on an instance: the sets of distinct values are
	// disjoint.
	ids = make([]string, 0, bestN)
	for _, s := range best {
		for id := range s {
			ids = append(ids, id)
		}
	}
	return ids, false
}
