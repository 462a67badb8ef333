package memory_test

import (
	"testing"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	"github.com/berkcansavur/relaybus/relaybus/storetest"
)

func TestStoreDeletesCompleted(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) relaybus.Store[*memory.Tx] {
		return memory.New(nil)
	}, &storetest.Options{DeletesCompleted: true})
}

func TestStoreRetainsCompleted(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) relaybus.Store[*memory.Tx] {
		return memory.New(&memory.Options{RetainCompleted: true})
	}, nil)
}
