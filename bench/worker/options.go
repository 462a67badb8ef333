package worker

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// classifyOptions walks the raw config the harness sent and sorts every
// option it set into applied (a field this worker knows, set to a
// non-zero value) and ignored (a field or free-form option this worker
// does not know). Protocol 1 promises the harness both lists, so that a
// comparison never hides that one side ran without a feature.
func classifyOptions(raw []byte) (applied, ignored []string, err error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, err
	}
	walk("", m, reflect.TypeFor[protocol.Config](), &applied, &ignored)
	sort.Strings(applied)
	sort.Strings(ignored)
	return applied, ignored, nil
}

// topLevelOptions are the top-level fields that are options (the worker
// applies them or, when it predates them, ignores them); every other
// top-level field is plumbing (protocol, role, name, record path).
var topLevelOptions = map[string]bool{"cpu_profile_path": true}

// knownOptions are the free-form Options keys this version applies, per
// group ("store", "publisher", "dispatcher"). v0.1.0 applies none: every
// key there is reported as ignored.
var knownOptions = map[string]map[string]bool{
	"store": {optCompletionHistory: true},
}

// optCompletionHistory (bool) turns on the store's completion history
// (postgres.Options.CompletionHistory, mongo.Options.CompletionHistory):
// one history row per completion, listed and counted as completed. Since
// 0.2.0; older workers report it ignored.
const optCompletionHistory = "completion_history"

// storeOptions are the free-form store options this worker applies,
// checked once when the config is read.
type storeOptions struct {
	completionHistory bool
}

// parseStoreOptions reads and checks the free-form store options this
// worker knows; unknown ones are left alone (ready reports them ignored).
func parseStoreOptions(opts map[string]any) (storeOptions, error) {
	var o storeOptions
	if v, ok := opts[optCompletionHistory]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return o, fmt.Errorf("worker: store option %s must be true or false, got %v", optCompletionHistory, v)
		}
		o.completionHistory = b
	}
	return o, nil
}

func walk(prefix string, m map[string]any, t reflect.Type, applied, ignored *[]string) {
	fields := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = f
		}
	}
	for k, v := range m {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		f, ok := fields[k]
		if !ok {
			*ignored = append(*ignored, path)
			continue
		}
		switch {
		case k == "options" && prefix != "":
			opts, _ := v.(map[string]any)
			for name := range opts {
				if knownOptions[prefix][name] {
					*applied = append(*applied, path+"."+name)
				} else {
					*ignored = append(*ignored, path+"."+name)
				}
			}
		case f.Type.Kind() == reflect.Struct:
			if sub, ok := v.(map[string]any); ok {
				walk(path, sub, f.Type, applied, ignored)
			}
		case prefix == "" && !topLevelOptions[k]:
			// Top-level plumbing is not an option.
		default:
			if !isZeroJSON(v) {
				*applied = append(*applied, path)
			}
		}
	}
}

func isZeroJSON(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case float64:
		return x == 0
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}
