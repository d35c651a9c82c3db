package env

import (
	"bufio"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAOFWrites(t *testing.T) {
	resp := func(args ...string) string {
		var b strings.Builder
		b.WriteString("*" + itoa(len(args)) + "\r\n")
		for _, a := range args {
			b.WriteString("$" + itoa(len(a)) + "\r\n" + a + "\r\n")
		}
		return b.String()
	}
	aof := "#TS:1796600000\r\n" + resp("SELECT", "0") + resp("MULTI") +
		resp("SET", "dlock:fence:dlock-mutex", "7") + resp("SET", "reg:dlock-mutex", "7:41") + resp("EXEC") +
		resp("SET", "ctl:dlock-mutex", "3") +
		"#TS:1796600002\r\n" + resp("SET", "reg:dlock-mutex", "9:42") +
		"*3\r\n$3\r\nSET\r\n$15\r\nreg:dlock-mutex\r\n$4\r\n9:4" // torn by a kill
	recs, err := aofWrites(bufio.NewReader(strings.NewReader(aof)))
	require.NoError(t, err)
	assert.Equal(t, []history.Record{
		{Kind: history.Write, Lock: "dlock-mutex", T: 1796600000e9, Tok: 7, Value: 41},
		{Kind: history.Write, Lock: "dlock-mutex", T: 1796600002e9, Tok: 9, Value: 42},
	}, recs)

	_, err = aofWrites(bufio.NewReader(strings.NewReader(resp("SET", "reg:dlock-mutex", "garbage"))))
	assert.ErrorContains(t, err, `register reg:dlock-mutex holds "garbage"`)
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestS3Record(t *testing.T) {
	// oklog/ulid's compatibility test: 01ARYZ6S41... is 1469918176385 ms.
	if ms, err := ulidTime("01ARYZ6S410000000000000000"); err != nil || ms != 1469918176385 {
		t.Errorf("ulidTime: %d, %v; want 1469918176385", ms, err)
	}
	if _, err := ulidTime("null"); err == nil {
		t.Error(`ulidTime("null"): no error`)
	}
	r, err := s3Record("dlock-mutex", "7:42", "dlock-mutex:7")
	if err != nil || r.Tok != 7 || r.Value != 42 || r.Lock != "dlock-mutex" {
		t.Errorf("s3Record: %+v, %v", r, err)
	}
	if _, err := s3Record("dlock-mutex", "7:42", "dlock-mutex:8"); err == nil {
		t.Error("s3Record: a body whose token is not its metadata's passed")
	}
	if _, err := s3Record("dlock-mutex", "7:42", ""); err != nil {
		t.Errorf("s3Record without metadata (a plain PutObject): %v", err)
	}
	if _, err := s3Record("dlock-mutex", "x", ""); err == nil {
		t.Error("s3Record: a malformed body passed")
	}
}
