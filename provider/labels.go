package provider

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MaxUserLabels bounds the caller's labels: AWS allows 50 tags per resource
// and Azure 50, of which gpuprov's identity and the Name tag take 3.
const MaxUserLabels = 40

// userLabelKeyRE and userLabelValueRE are the strictest rules among the
// clouds gpuprov supports, so one set of labels fits them all:
//   - GCP labels: keys start with a lowercase letter; keys and values are
//     lowercase letters, digits, '_' and '-', at most 63 characters
//     (cloud.google.com/compute/docs/labeling-resources#requirements);
//   - Lambda Cloud tags: keys match ^[a-z][a-z0-9-:]+$, at most 55
//     characters, so no '_' and at least two characters (OpenAPI 1.8.3,
//     RequestedTagEntry);
//   - Kubernetes label values begin and end with an alphanumeric character
//     (kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set);
//   - AWS tag and Azure tag rules are looser (AWS: 128-character keys,
//     256-character values, no "aws:" prefix; Azure: no <>%&\?/ in keys).
var (
	userLabelKeyRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{0,53}[a-z0-9]$`)
	userLabelValueRE = regexp.MustCompile(`^([a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?)?$`)
)

// ValidateUserLabels checks a caller's labels against the strictest rules of
// every supported cloud, so that a request is refused before anything is
// created rather than by one cloud mid-launch. Keys starting with "gpuprov"
// are gpuprov's own.
func ValidateUserLabels(labels map[string]string) error {
	if len(labels) > MaxUserLabels {
		return fmt.Errorf("%d labels; at most %d", len(labels), MaxUserLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := labels[k]
		switch {
		case strings.HasPrefix(k, LabelVM):
			return fmt.Errorf("key %q: keys starting with %q are gpuprov's own", k, LabelVM)
		case !userLabelKeyRE.MatchString(k):
			return fmt.Errorf("key %q: use 2 to 55 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit", k)
		case !userLabelValueRE.MatchString(v):
			return fmt.Errorf("%s=%q: use at most 63 lowercase letters, digits, '_' and '-', starting and ending with a letter or digit", k, v)
		}
	}
	return nil
}
