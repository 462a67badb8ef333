package worker

import (
	"fmt"

	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// optionRules sort the options of a config into applied and ignored.
// v0.1.0 applies no free-form option: every key there is reported
// ignored.
var optionRules = workerkit.OptionRules{
	TopLevel: map[string]bool{workerkit.OptionCPUProfilePath: true},
	Known:    map[string]map[string]bool{"store": {optCompletionHistory: true}},
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
