package aws

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/org/gpuprov/provider"
)

// imdsBase is where an EC2 instance reaches its instance metadata service
// (IMDS).
const imdsBase = "http://169.254.169.254"

// spotLead is the notice EC2 documents for a Spot Instance interruption:
// "a warning that is issued two minutes before Amazon EC2 stops or
// terminates your Spot Instance" (EC2 User Guide, "Spot Instance
// interruption notices",
// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
const spotLead = 2 * time.Minute

// NoticeProbe implements provider.NoticeWatcher for spot instances: the
// machine asks its IMDS (IMDSv2, which Create makes the only version the
// instance answers) for spot/instance-action and
// events/recommendations/rebalance. An on-demand instance gets no probe:
// EC2 announces interruptions through those items to Spot Instances only.
func (p *Provider) NoticeProbe(t provider.NoticeTarget) (provider.NoticeProbe, bool) {
	if !t.Spot {
		return provider.NoticeProbe{}, false
	}
	return provider.NoticeProbe{Command: noticeCommand(imdsBase), Lead: spotLead, Parse: parseNotice}, true
}

var _ provider.NoticeWatcher = (*Provider)(nil)

// The probe's output sections, one line each: "<section> <HTTP status>
// <body>", the body on one line and empty unless the status is 200.
const (
	sectionAction    = "instance-action"
	sectionRebalance = "rebalance"
)

// noticeCommand is the probe's shell command for an IMDS at base: a
// session token (PUT api/token, a minute's TTL, never printed), then one
// GET per item with that token. curl's --fail keeps the body of an error
// answer (IMDS's HTML 404 page) out of the output; -w adds the status, so
// that "not there" (404) tells apart from "not answered" (000) or "token
// refused" (401). Each GET is bounded to two seconds: the probe runs every
// provider.NoticeEvery.
func noticeCommand(base string) string {
	return "t=$(curl -sf --max-time 2 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' '" + base + "/latest/api/token')\n" +
		"gpuprov_imds() { r=$(curl -sf --max-time 2 -H \"X-aws-ec2-metadata-token: $t\" -w ' %{http_code}' '" + base + "/latest/meta-data/'\"$2\"); " +
		"printf '%s %s %s\\n' \"$1\" \"${r##* }\" \"$(printf '%s' \"${r% *}\" | tr -d '\\r\\n')\"; }\n" +
		"gpuprov_imds " + sectionAction + " spot/instance-action\n" +
		"gpuprov_imds " + sectionRebalance + " events/recommendations/rebalance"
}

// instanceAction is the spot/instance-action item: "the action and the
// approximate time, in UTC, when the action will occur", e.g.
// {"action": "terminate", "time": "2017-09-18T08:22:00Z"}; action is
// hibernate, stop or terminate. The item is absent (HTTP 404) unless EC2
// is preparing to stop or terminate the instance.
// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html#instance-action-metadata
type instanceAction struct {
	Action string `json:"action"`
	Time   string `json:"time"`
}

// rebalance is the events/recommendations/rebalance item: "the
// approximate time, in UTC, when the rebalance recommendation signal was
// emitted", e.g. {"noticeTime": "2020-10-27T08:22:00Z"}; absent (HTTP
// 404) until one is.
// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html#cp-instance-metadata
type rebalance struct {
	NoticeTime string `json:"noticeTime"`
}

// parseNotice reads one output of noticeCommand. instance-action becomes
// a NoticePreempt at its time (a hibernation too: EC2 says it starts at
// once, and its time says when), rebalance a NoticeRebalance without a
// time; 404 is "not announced". Any other status, a missing or unknown
// section, or a body that is not the documented JSON is an error. A
// notice read from one section is returned even when the other is an
// error, and an item whose time does not parse is still a notice (at an
// unknown time) beside the error.
func parseNotice(out []byte) ([]provider.Notice, error) {
	var notices []provider.Notice
	var errs []error
	seen := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\r\n")
		if strings.TrimSpace(line) == "" {
			continue
		}
		section, rest, _ := strings.Cut(line, " ")
		code, body, _ := strings.Cut(rest, " ")
		if section != sectionAction && section != sectionRebalance {
			errs = append(errs, fmt.Errorf("aws notice: unexpected line %q", line))
			continue
		}
		if seen[section] {
			errs = append(errs, fmt.Errorf("aws notice: %s twice", section))
			continue
		}
		seen[section] = true
		switch code {
		case "404":
			continue
		case "200":
		case "000":
			errs = append(errs, fmt.Errorf("aws notice: IMDS did not answer for %s", section))
			continue
		default:
			errs = append(errs, fmt.Errorf("aws notice: IMDS answered HTTP %s for %s", code, section))
			continue
		}
		n, err := parseItem(section, []byte(body))
		if n != nil {
			notices = append(notices, *n)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range []string{sectionAction, sectionRebalance} {
		if !seen[s] {
			errs = append(errs, fmt.Errorf("aws notice: no %s answer in the probe's output", s))
		}
	}
	return notices, errors.Join(errs...)
}

// parseItem reads the 200 body of section.
func parseItem(section string, body []byte) (*provider.Notice, error) {
	if section == sectionAction {
		var a instanceAction
		if err := json.Unmarshal(body, &a); err != nil || a.Action == "" {
			return nil, fmt.Errorf("aws notice: spot/instance-action %q is not {\"action\", \"time\"}", body)
		}
		n := &provider.Notice{Kind: provider.NoticePreempt, Detail: "spot instance-action: " + a.Action}
		at, err := time.Parse(time.RFC3339, a.Time)
		if err != nil {
			return n, fmt.Errorf("aws notice: spot/instance-action time %q: %w", a.Time, err)
		}
		n.At = at
		return n, nil
	}
	var r rebalance
	if err := json.Unmarshal(body, &r); err != nil || r.NoticeTime == "" {
		return nil, fmt.Errorf("aws notice: events/recommendations/rebalance %q is not {\"noticeTime\"}", body)
	}
	n := &provider.Notice{Kind: provider.NoticeRebalance, Detail: "rebalance recommendation at " + r.NoticeTime}
	if _, err := time.Parse(time.RFC3339, r.NoticeTime); err != nil {
		return n, fmt.Errorf("aws notice: rebalance noticeTime %q: %w", r.NoticeTime, err)
	}
	return n, nil
}
