package postgres

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

var updateStatements = flag.Bool("update-statements", false, "rewrite testdata/statements.golden from the statements as rendered now")

// statementsGolden holds the rendered text of every statement the store
// runs, for two sets of identifiers: the schema script, each statement of
// queries, and DeliveryList's statement and arguments for every
// combination of filters. It pins them: a change of any rendered
// statement, including one made while moving SQL between files, shows in
// this file's diff. Regenerate it (-update-statements) only for a
// deliberate change of a statement, and read the diff.
const statementsGolden = "testdata/statements.golden"

// fragmentFields are the fields of queries that are pieces of
// statements, not statements: they are covered by the statements that
// use them.
var fragmentFields = map[string]bool{
	"events": true, "deliveries": true, "keys": true, "lanes": true, "history": true, "inFlight": true,
}

// renderedStatements renders every statement of a store on (schema,
// prefix), named "schema.prefix/name", in a fixed order.
func renderedStatements(t *testing.T, schema, prefix string) [][2]string {
	t.Helper()
	var out [][2]string
	add := func(name, text string) {
		out = append(out, [2]string{schema + "." + prefix + "/" + name, strings.TrimSpace(text)})
	}
	schemaSQL, err := renderSchema(schema, prefix)
	require.NoError(t, err)
	add("schema", schemaSQL)

	q, err := buildQueries(schema, prefix)
	require.NoError(t, err)
	s := &Store{q: q}
	v := reflect.ValueOf(s.q)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if fragmentFields[f.Name] || f.Type.Kind() != reflect.String {
			continue
		}
		add(f.Name, v.Field(i).String())
	}
	wq, err := renderWakeQueries(schema, prefix)
	require.NoError(t, err)
	add("publishWake", wq.publish)
	add("wakeNotify", wq.notify)
	add("wakeListen", wq.listen)
	add("wakeUnlisten", wq.unlisten)

	statuses := []relaytype.Status{"", relaytype.StatusPending, relaytype.StatusProcessing, relaytype.StatusDead, relaytype.StatusCompleted}
	for filters := range 8 {
		for _, status := range statuses {
			p := &driver.DeliveryListParams{Status: status}
			name := "list"
			if filters&1 != 0 {
				p.Handler, name = "h", name+" handler"
			}
			if filters&2 != 0 {
				p.Key, name = "k", name+" key"
			}
			if filters&4 != 0 {
				p.EventID, name = "e", name+" event"
			}
			name += " status=" + string(status)
			sql, args, err := s.listQuery(p, 7, 50)
			require.NoError(t, err)
			add(name, sql)
			add(name+" args", fmt.Sprintf("%#v", args))
		}
	}
	return out
}

// TestStatementsGolden checks that every statement renders as
// statementsGolden has it: byte for byte (leading and trailing blanks
// aside), except the schema script, whose comments are documentation
// that SchemaSQL hands out and may change: it is compared without its
// comments and with every run of blanks as one space (normalizeSQL).
func TestStatementsGolden(t *testing.T) {
	var got [][2]string
	for _, ids := range [][2]string{{DefaultSchema, DefaultTablePrefix}, {"rb_test", "x_"}} {
		got = append(got, renderedStatements(t, ids[0], ids[1])...)
	}
	var b strings.Builder
	for _, e := range got {
		fmt.Fprintf(&b, "-- %s --\n%s\n", e[0], e[1])
	}
	path := filepath.FromSlash(statementsGolden)
	if *updateStatements {
		require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
		return
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	want := parseStatementsGolden(t, string(data))

	seen := map[string]bool{}
	for _, e := range got {
		name, text := e[0], e[1]
		seen[name] = true
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: not in %s", name, statementsGolden)
			continue
		}
		if strings.HasSuffix(name, "/schema") {
			if normalizeSQL(text) != normalizeSQL(w) {
				t.Errorf("%s: differs from %s beyond comments and blanks:\n%s", name, statementsGolden, firstDifference(normalizeSQL(w), normalizeSQL(text)))
			}
			continue
		}
		if text != w {
			t.Errorf("%s: differs from %s:\n%s", name, statementsGolden, firstDifference(w, text))
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s: in %s, no longer rendered", name, statementsGolden)
		}
	}
	if t.Failed() {
		actual := path + ".actual"
		if err := os.WriteFile(actual, []byte(b.String()), 0o644); err == nil {
			t.Logf("the statements as rendered now are in %s", actual)
		}
	}
}

// parseStatementsGolden reads the "-- name --" sections of the golden
// file.
func parseStatementsGolden(t *testing.T, data string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var name string
	var body []string
	flush := func() {
		if name != "" {
			out[name] = strings.Join(body, "\n")
		}
	}
	for line := range strings.Lines(data) {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(line, "-- ") && strings.HasSuffix(line, " --") && strings.Contains(line, "/") &&
			!strings.Contains(line[3:len(line)-3], " --") {
			flush()
			name, body = line[3:len(line)-3], nil
			continue
		}
		body = append(body, line)
	}
	flush()
	require.NotEmpty(t, out)
	return out
}

// normalizeSQL drops the -- comments of sql and makes every run of blanks
// outside quotes one space: the text PostgreSQL parses the same. Quoted
// text ('...', "...") is kept as it is. sql has no /* */ comments.
func normalizeSQL(sql string) string {
	var b strings.Builder
	var quote rune
	blank := false
	rs := []rune(sql)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			b.WriteRune(r)
			if r == quote {
				quote = 0
			}
			continue
		case r == '-' && i+1 < len(rs) && rs[i+1] == '-':
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
			blank = true
			continue
		case unicode.IsSpace(r):
			blank = true
			continue
		}
		if blank && b.Len() > 0 {
			b.WriteByte(' ')
		}
		blank = false
		b.WriteRune(r)
		if r == '\'' || r == '"' {
			quote = r
		}
	}
	return b.String()
}

func TestNormalizeSQL(t *testing.T) {
	for _, c := range [][2]string{
		{"SELECT 1 -- one\n\tFROM  x", "SELECT 1 FROM x"},
		{"SELECT 'a  -- b'  -- c\n", "SELECT 'a  -- b'"},
		{"SELECT \"x  y\"\n", `SELECT "x  y"`},
		{"SELECT 'it''s'", "SELECT 'it''s'"},
	} {
		require.Equal(t, c[1], normalizeSQL(c[0]), c[0])
	}
}

// firstDifference shows where want and got part.
func firstDifference(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	from := max(i-80, 0)
	return fmt.Sprintf("at byte %d:\nwant ...%q\n got ...%q", i, want[from:min(i+80, len(want))], got[from:min(i+80, len(got))])
}
