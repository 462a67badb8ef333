package workerkit

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// OptionRules say which options of a config a worker applies. Protocol 1
// promises the harness the lists of applied and ignored options, so that
// a comparison never hides that one side ran without a feature.
type OptionRules struct {
	// TopLevel are the top-level fields that are options (applied when
	// set); every other top-level field is plumbing (protocol, role,
	// name, record path) and listed nowhere.
	TopLevel map[string]bool
	// Ignored are the fields (dotted paths) the worker knows but cannot
	// apply, with the reason; they are listed ignored whenever they are
	// set.
	Ignored map[string]string
	// Known are the free-form Options keys the worker applies, per group
	// ("store", "publisher", "dispatcher"); every other key is ignored.
	Known map[string]map[string]bool
}

// Classify walks the raw config the harness sent and sorts every option
// it set into applied (a field the worker applies, set to a non-zero
// value) and ignored (a field it cannot apply, a field it does not know,
// or a free-form option it does not know), each sorted.
func (r *OptionRules) Classify(raw []byte) (applied, ignored []string, err error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, err
	}
	r.walk("", m, reflect.TypeFor[protocol.Config](), &applied, &ignored)
	sort.Strings(applied)
	sort.Strings(ignored)
	return applied, ignored, nil
}

func (r *OptionRules) walk(prefix string, m map[string]any, t reflect.Type, applied, ignored *[]string) {
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
		case r.Ignored[path] != "" && !isZeroJSON(v):
			*ignored = append(*ignored, path)
		case k == "options" && prefix != "":
			opts, _ := v.(map[string]any)
			for name := range opts {
				if r.Known[prefix][name] {
					*applied = append(*applied, path+"."+name)
				} else {
					*ignored = append(*ignored, path+"."+name)
				}
			}
		case f.Type.Kind() == reflect.Struct:
			if sub, ok := v.(map[string]any); ok {
				r.walk(path, sub, f.Type, applied, ignored)
			}
		case prefix == "" && !r.TopLevel[k]:
			// Top-level plumbing is not an option.
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

// WholeOption reads the free-form dispatcher option name: 0 when opts
// does not set it, else a whole number in [1, maxN]; any other value is
// a config error (a known option with a bad value; an unknown option is
// only reported ignored). unit, when not empty, is what the number
// counts ("milliseconds"), for the error.
func (k *Checks) WholeOption(opts map[string]any, name, unit string, maxN int) (int, error) {
	v, ok := opts[name]
	if !ok {
		return 0, nil
	}
	n, ok := wholeNumber(v, maxN)
	if !ok {
		if unit != "" {
			unit = " of " + unit
		}
		return 0, fmt.Errorf("%s: dispatcher option %s must be a whole number%s in [1, %d], got %v", k.Pkg, name, unit, maxN, v)
	}
	return n, nil
}

// wholeNumber reads a free-form option's value that must be a whole
// number in [1, maxN] (a JSON number, so a float64 here).
func wholeNumber(v any, maxN int) (int, bool) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || f < 1 || f > float64(maxN) {
		return 0, false
	}
	return int(f), true
}
