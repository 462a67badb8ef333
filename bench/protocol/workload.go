package protocol

import "strconv"

// The functions below define protocol 1's deterministic workload: given
// an event index, every worker of every version derives the same id, key
// and failure plan, so both sides of a comparison publish and fail the
// same events, and the harness knows which events are poison without
// reading payloads. Their results must never change.

// EventID is the id of the event with this index.
func EventID(prefix string, index int64) string {
	return prefix + strconv.FormatInt(index, 10)
}

// Key is the ordering key of the event with this index ("" = unkeyed).
// Keys are assigned round robin so each key's events are spread evenly.
func Key(keys string, keyCount int, index int64) string {
	if keys == "" || keys == "none" || keyCount < 1 {
		return ""
	}
	return "k" + strconv.FormatInt(index%int64(keyCount), 10)
}

// IsPoison reports whether the event with this index is planted to fail
// until it is dead-lettered.
func IsPoison(index int64, poisonEvery int) bool {
	return poisonEvery > 0 && index%int64(poisonEvery) == int64(poisonEvery-1)
}

// Payload markers: the first payload byte says whether the event is
// poison, so a dispatcher knows without a lookup.
const (
	PayloadPoison byte = 'P'
	PayloadNormal byte = 'N'
)
