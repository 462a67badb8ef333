package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) relaybus.Store[pgx.Tx] {
		s, _ := setup(t, nil)
		return s
	}, &storetest.Options{DeletesCompleted: false})
}
