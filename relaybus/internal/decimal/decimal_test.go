package decimal

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func TestParse(t *testing.T) {
	good := map[string]int64{"0": 0, "7": 7, "1234567890": 1234567890, "9223372036854775807": 9223372036854775807}
	for s, want := range good {
		if v, ok := Parse(s); !ok || v != want {
			t.Errorf("Parse(%q) = %d, %v", s, v, ok)
		}
	}
	for _, s := range []string{"", "00", "01", "-1", "+1", " 1", "1 ", "1e3", "9223372036854775808", "99999999999999999999"} {
		if v, ok := Parse(s); ok {
			t.Errorf("Parse(%q) = %d, true; want false", s, v)
		}
	}
}

func TestListCursor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{{"", 0, true}, {"1", 1, true}, {"9000", 9000, true}, {"0", 0, false}, {"-1", 0, false}, {"007", 0, false}, {"x", 0, false}} {
		got, err := ListCursor("relaybus/test", tc.in)
		if tc.ok {
			require.NoError(t, err, tc.in)
			require.Equal(t, tc.want, got, tc.in)
			continue
		}
		require.ErrorIs(t, err, relaytype.ErrInvalid, tc.in)
		require.ErrorContains(t, err, `relaybus/test: list: cursor "`+tc.in+`" is not one this store returned`)
	}
}
