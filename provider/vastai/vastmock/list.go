package vastmock

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
)

// The v1 listing, GET /api/v1/instances/ (showInstances in Vast's OpenAPI
// document, vast-ai/docs api-reference/openapi/yaml/show_instances.yaml):
// keyset pages of at most 25 ("Values ≤ 0 are treated as 5"), in id order;
// next_token is the cursor of the page's last row and null on the last
// page; select_cols returns only the named columns ("Unknown column names
// are returned as null"; ["*"], the default, is every column);
// select_filters takes eq, neq, gt, gte, lt, lte, in and notin on columns
// stored on the contract (computed ones such as dph_total and num_gpus
// answer 400); an invalid filter, order_by or after_token answers 400
// {"error": "invalid_request" | "invalid_token", "msg"}.

// pageSize is the listing's page (the v1 listing's maximum, 25).
const pageSize = 25

// filterable are the columns the fake filters on: those the document names
// ("actual_status, gpu_name, verification, id, label") and machine_id, a
// column of the contract record. Others answer 400, the computed ones as
// the document says, the rest because the fake does not know them.
var filterable = []string{"id", "label", "actual_status", "gpu_name", "verification", "machine_id"}

// Add puts in among the instances, settled at its Status ("" is running),
// as if it had been created earlier (also under another installation's or
// no label): its id is the next one, so instances added later are newer.
func (a *API) Add(in Instance) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	in.ID, in.settled = a.seq, true
	if in.Status == "" {
		in.Status = "running"
	}
	a.instances[in.ID] = &in
	return in.ID
}

// token is the cursor after id: base64 of {"values": {"id": N}}, the shape
// of the document's after_token example.
func token(id int64) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, `{"values": {"id": %d}}`, id))
}

func parseToken(t string) (int64, error) {
	b, err := base64.StdEncoding.DecodeString(t)
	if err != nil {
		return 0, err
	}
	var v struct {
		Values struct {
			ID *int64 `json:"id"`
		} `json:"values"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Values.ID == nil {
		return 0, fmt.Errorf("no id in %q", b)
	}
	return *v.Values.ID, nil
}

func badList(code, msg string) *http.Response {
	return js(http.StatusBadRequest, map[string]any{"error": code, "msg": msg})
}

// list answers the v1 showInstances.
func (a *API) list(r *http.Request) *http.Response {
	q := r.URL.Query()
	var sel map[string]map[string]any
	if s := q.Get("select_filters"); s != "" {
		if err := json.Unmarshal([]byte(s), &sel); err != nil {
			return badList("invalid_request", "select_filters is not a JSON object")
		}
	}
	for col, ops := range sel {
		if !slices.Contains(filterable, col) {
			return badList("invalid_request", fmt.Sprintf("column %q is not filterable", col))
		}
		for op := range ops {
			if !slices.Contains([]string{"eq", "neq", "gt", "gte", "lt", "lte", "in", "notin"}, op) {
				return badList("invalid_request", fmt.Sprintf("invalid operator %q", op))
			}
		}
	}
	desc := false
	if s := q.Get("order_by"); s != "" {
		var order []struct{ Col, Dir string }
		if err := json.Unmarshal([]byte(s), &order); err != nil || len(order) != 1 || order[0].Col != "id" {
			return badList("invalid_request", "the fake orders by id only") // a narrower check than Vast's
		}
		desc = order[0].Dir == "desc"
	}
	var cols []string
	if s := q.Get("select_cols"); s != "" {
		if err := json.Unmarshal([]byte(s), &cols); err != nil {
			return badList("invalid_request", "select_cols is not a JSON array")
		}
		if slices.Contains(cols, "*") {
			cols = nil
		}
	}
	var after *int64
	if t := q.Get("after_token"); t != "" {
		id, err := parseToken(t)
		if err != nil {
			return badList("invalid_token", "invalid after_token")
		}
		after = &id
	}
	limit := pageSize
	if n, err := strconv.Atoi(q.Get("limit")); err == nil {
		limit = min(n, pageSize)
		if n <= 0 {
			limit = 5
		}
	}
	var ids []int64
	for id, in := range a.instances {
		if after != nil && (!desc && id <= *after || desc && id >= *after) || !matches(wire(in), sel) {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if desc {
		slices.Reverse(ids)
	}
	total := len(ids)
	var next any
	if len(ids) > limit {
		ids = ids[:limit]
		next = token(ids[len(ids)-1])
	}
	out := []map[string]any{}
	for _, id := range ids {
		in := a.instances[id]
		in.lists++
		if !in.settled {
			switch {
			case in.lists > 2*a.BootLists:
				in.Status = "running"
			case in.lists > a.BootLists:
				in.Status = "loading"
			}
		}
		out = append(out, project(wire(in), cols))
	}
	return js(http.StatusOK, map[string]any{"success": true, "instances_found": len(out), "total_instances": total,
		"next_token": next, "instances": out})
}

// project keeps row's cols (every column when cols is nil); a column the
// row lacks is null.
func project(row map[string]any, cols []string) map[string]any {
	if cols == nil {
		return row
	}
	out := make(map[string]any, len(cols))
	for _, c := range cols {
		out[c] = row[c]
	}
	return out
}

// matches applies select_filters to a row: every operator of every column
// must hold. Numbers compare as numbers, strings as strings, null equals
// only null.
func matches(row map[string]any, sel map[string]map[string]any) bool {
	for col, ops := range sel {
		v := row[col]
		for op, want := range ops {
			var ok bool
			switch op {
			case "eq":
				ok = equal(v, want)
			case "neq":
				ok = !equal(v, want)
			case "in", "notin":
				list, _ := want.([]any)
				ok = slices.ContainsFunc(list, func(w any) bool { return equal(v, w) }) == (op == "in")
			default:
				c, comparable := compareValues(v, want)
				ok = comparable && (op == "gt" && c > 0 || op == "gte" && c >= 0 || op == "lt" && c < 0 || op == "lte" && c <= 0)
			}
			if !ok {
				return false
			}
		}
	}
	return true
}

func equal(v, w any) bool {
	if v == nil || w == nil {
		return v == nil && w == nil
	}
	c, ok := compareValues(v, w)
	return ok && c == 0
}

// compareValues orders two numbers or two strings; false for anything else.
func compareValues(v, w any) (int, bool) {
	if x, ok := number(v); ok {
		y, ok := number(w)
		return compare(x, y), ok
	}
	x, ok1 := v.(string)
	y, ok2 := w.(string)
	switch {
	case !ok1 || !ok2:
		return 0, false
	case x < y:
		return -1, true
	case x > y:
		return 1, true
	}
	return 0, true
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	}
	return 0, false
}

// wire is the instance as the v1 listing returns it with every column.
func wire(in *Instance) map[string]any {
	var status, ports any
	if in.Status != "" {
		status = in.Status
	}
	intended := "running"
	if in.Status == "running" {
		ports = map[string]any{"22/tcp": []map[string]string{{"HostIp": "0.0.0.0", "HostPort": strconv.FormatInt(40000+in.ID%1000, 10)}}}
	}
	var label any
	if in.Label != "" {
		label = in.Label
	}
	return map[string]any{"id": in.ID, "actual_status": status, "intended_status": intended, "cur_state": "running",
		"next_state": "running", "label": label, "image_uuid": in.Image, "image_runtype": in.Runtype, "image_args": []string{},
		"onstart": in.Onstart, "status_msg": nil, "public_ipaddr": "192.0.2.10\n", "ssh_host": "ssh5.vast.test",
		"ssh_port": 10000 + in.ID%1000, "ssh_idx": "5", "machine_id": in.MachineID, "gpu_name": in.GPUName,
		"num_gpus": in.NumGPUs, "disk_space": in.Disk, "start_date": 1.7672256e9, "ports": ports,
		"geolocation": "Texas, United States", "extra_env": [][]string{}, "dph_total": 1.0, "is_bid": false,
		"verification": "verified", "rentable": false}
}
