package main

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// ignoredFields are the config fields this worker knows but cannot apply,
// with the reason; they are reported ignored whenever they are set.
var ignoredFields = map[string]string{
	"store.mongo_uri":                 "River runs on postgres only",
	"store.database":                  "River runs on postgres only",
	"workload.keys":                   "River does not order jobs by key; the key is carried and recorded only",
	"workload.key_count":              "River does not order jobs by key; the key is carried and recorded only",
	"dispatcher.batch":                "River fetches up to MaxWorkers minus running jobs; it has no separate fetch limit",
	"dispatcher.completion_window_us": "River's completer batches by itself; its settings are not exposed",
	"dispatcher.completion_batch_max": "River's completer batches by itself; its settings are not exposed",
	// Fields the protocol gained after this peer was written; they are
	// ignored whether or not this build's bench/protocol knows them.
	"dispatcher.completion_window_disabled": "River's completer batches by itself; it cannot be turned off",
	"cpu_profile_path":                      "this peer writes no CPU profile",
}

// knownOptions are the free-form Options keys this worker applies, per
// group; every other key is reported ignored.
var knownOptions = map[string]map[string]bool{
	"dispatcher": {optFetchCooldownMs: true, optPollOnly: true},
}

// Free-form dispatcher options.
const (
	optFetchCooldownMs = "fetch_cooldown_ms"
	optPollOnly        = "poll_only"
)

// classifyOptions walks the raw config the harness sent and sorts every
// option it set into applied (a field this worker applies, set to a
// non-zero value) and ignored (a field it cannot apply, a field it does
// not know, or a free-form option it does not know). Protocol 1 promises
// the harness both lists, so that a comparison never hides that one side
// ran without a feature.
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
		case ignoredFields[path] != "" && !isZeroJSON(v):
			*ignored = append(*ignored, path)
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
		case prefix == "":
			// Top-level plumbing (protocol, role, name, record path) is
			// not an option.
		case isZeroJSON(v):
		default:
			*applied = append(*applied, path)
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

// dispatcherOptions are the free-form dispatcher options this worker
// applies.
type dispatcherOptions struct {
	// fetchCooldown overrides the derived FetchCooldown (0: derived).
	fetchCooldown time.Duration
	pollOnly      bool
}

// parseDispatcherOptions reads the known free-form dispatcher options; a
// known option with a bad value is a config error, an unknown one is
// ignored (and reported by classifyOptions).
func parseDispatcherOptions(opts map[string]any) (dispatcherOptions, error) {
	var d dispatcherOptions
	if v, ok := opts[optFetchCooldownMs]; ok {
		ms, ok := v.(float64)
		if !ok || ms != math.Trunc(ms) || ms < 1 || ms > maxFetchCooldownMs {
			return d, fmt.Errorf("river: dispatcher option %s must be a whole number of milliseconds in [1, %d], got %v", optFetchCooldownMs, maxFetchCooldownMs, v)
		}
		d.fetchCooldown = time.Duration(ms) * time.Millisecond
	}
	if v, ok := opts[optPollOnly]; ok {
		b, ok := v.(bool)
		if !ok {
			return d, fmt.Errorf("river: dispatcher option %s must be true or false, got %v", optPollOnly, v)
		}
		d.pollOnly = b
	}
	return d, nil
}
