package names

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A refused character is named as a character, with its code point and
// byte offset; a byte that is not UTF-8 by its value.
func TestRefusedCharacterNamed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{Name("café"), `name "café": 'é' (U+00E9) at byte 3 is not in [A-Za-z0-9._/-]`},
		{Name("a b"), `name "a b": ' ' (U+0020) at byte 1 is not in [A-Za-z0-9._/-]`},
		{Name("x\n"), `name "x\n": '\n' (U+000A) at byte 1 is not in [A-Za-z0-9._/-]`},
		{Name("jobs/日本"), `name "jobs/日本": '日' (U+65E5) at byte 5 is not in [A-Za-z0-9._/-]`},
		{Name("ab\xffc"), `name "ab\xffc": byte 0xff at 2 (not UTF-8) is not in [A-Za-z0-9._/-]`},
		{Name("a\uFFFD"), `name "a�": '�' (U+FFFD) at byte 1 is not in [A-Za-z0-9._/-]`},
		{Owner("host 3"), `owner "host 3": ' ' (U+0020) at byte 4 is not printable ASCII`},
		{Owner("hôte"), `owner "hôte": 'ô' (U+00F4) at byte 1 is not printable ASCII`},
	} {
		if assert.Error(t, tc.err, tc.want) {
			assert.Equal(t, tc.want, tc.err.Error())
		}
	}
	for _, ok := range []string{"jobs/nightly", "a-b_c.d", strings.Repeat("x", MaxLen)} {
		assert.NoError(t, Name(ok), ok)
	}
	assert.NoError(t, Owner("host-3/pid-42"))
}
