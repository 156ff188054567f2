package hookwire

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// strictUnmarshal reads JSON as the hook server reads a request: encoding/json, unknown members refused.
func strictUnmarshal(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// randomString mixes what a JSON string must escape or repair: quotes, backslashes, control characters, DEL,
// non-ASCII characters, surrogates' code points and bytes that are not UTF-8.
func randomString(r *rand.Rand) string {
	pieces := []string{"a", "Z", "9", " ", `"`, `\`, "/", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "é", "€", "😀",
		"\u2028", "\xff", "\xc3", "\xe2\x82", "<", ">", "&", "juice", "\ufffd"}
	var b strings.Builder
	for n := r.IntN(12); n > 0; n-- {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randomFloat(r *rand.Rand) float64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return float64(r.IntN(600))
	case 2:
		return r.Float64() * 10
	case 3:
		return math.Copysign(0, -1)
	case 4:
		return r.NormFloat64() * 1e25
	}
	return r.Float64() * 1e-9
}

// What the hook writes, the server reads as encoding/json reads it (unknown members refused), field for field,
// over many requests with every kind of character; what the server writes, the hook reads as encoding/json would.
func TestCodecAgreesWithEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		pr := PrologRequest{Cluster: randomString(r), JobID: r.Uint32(), Run: r.IntN(1000) - 10, WaitSeconds: randomFloat(r)}
		ours, err := encodePrologRequest(pr)
		require.NoError(t, err)
		var got, want PrologRequest
		require.NoError(t, strictUnmarshal(ours, &got), "%s", ours)
		theirs, err := json.Marshal(pr)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(theirs, &want))
		require.Equal(t, want, got, "%s", ours)

		er := EpilogRequest{Cluster: randomString(r), JobID: r.Uint32(), Run: r.IntN(1000), WaitSeconds: randomFloat(r)}
		if r.IntN(2) == 0 {
			er.ExitCode = randomString(r)
		}
		ours, err = encodeEpilogRequest(er)
		require.NoError(t, err)
		var gotE, wantE EpilogRequest
		require.NoError(t, strictUnmarshal(ours, &gotE), "%s", ours)
		theirs, err = json.Marshal(er)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(theirs, &wantE))
		require.Equal(t, wantE, gotE, "%s", ours)

		rep := PrologReply{Outcome: randomString(r), State: randomString(r), Reason: randomString(r), File: randomString(r)}
		if r.IntN(3) > 0 {
			rep.Session = make([]byte, r.IntN(2000))
			for k := range rep.Session {
				rep.Session[k] = byte(r.Uint32())
			}
		}
		wire, err := json.Marshal(rep)
		require.NoError(t, err)
		var gotR, wantR PrologReply
		require.NoError(t, decodePrologReply(wire, &gotR), "%s", wire)
		require.NoError(t, json.Unmarshal(wire, &wantR))
		require.Equal(t, wantR, gotR, "%s", wire)

		erep := EpilogReply{Outcome: randomString(r), State: randomString(r), Reason: randomString(r)}
		wire, err = json.Marshal(erep)
		require.NoError(t, err)
		var gotER, wantER EpilogReply
		require.NoError(t, decodeEpilogReply(wire, &gotER), "%s", wire)
		require.NoError(t, json.Unmarshal(wire, &wantER))
		require.Equal(t, wantER, gotER, "%s", wire)
	}
	// The exact bytes of a plain request, as the server's log would show it.
	b, err := encodePrologRequest(PrologRequest{Cluster: "juicetest", JobID: 42, Run: 1, WaitSeconds: 10})
	require.NoError(t, err)
	require.Equal(t, `{"cluster":"juicetest","job_id":42,"run":1,"wait_seconds":10}`, string(b))
	_, err = encodePrologRequest(PrologRequest{WaitSeconds: math.NaN()})
	require.ErrorContains(t, err, "NaN")
}

// A reply is read whatever else a newer controller puts in it, with JSON's escapes; what is not one JSON object
// with string members where the reply has its fields is refused, as encoding/json refuses it.
func TestDecodeReply(t *testing.T) {
	good := map[string]PrologReply{
		`{"outcome":"ready","file":"42.0.session","session":"AAEC"}`:                         {Outcome: "ready", File: "42.0.session", Session: []byte{0, 1, 2}},
		" \n{ \"outcome\" : \"waiting\" , \"state\":\"requesting\"}\t":                       {Outcome: "waiting", State: "requesting"},
		`{"reason":"\u00e9\ud83d\ude00\/\"\\\b\f\n\r\t","outcome":"failed"}`:                 {Outcome: "failed", Reason: "é😀/\"\\\b\f\n\r\t"},
		`{"reason":"\ud800x\udc00"}`:                                                         {Reason: "\ufffdx\ufffd"},
		"{\"reason\":\"a\xffb\"}":                                                            {Reason: "a\ufffdb"},
		`{"new":{"a":[1,-2.5e+3,true,false,null,{"b":"\""}],"c":{}},"outcome":"none","n":0}`: {Outcome: "none"},
		`{"outcome":"ready","outcome":"failed"}`:                                             {Outcome: "failed"},
		`{"session":null,"state":null}`:                                                      {},
		`{}`:                                                                                 {},
	}
	for in, want := range good {
		var got, theirs PrologReply
		require.NoError(t, decodePrologReply([]byte(in), &got), in)
		require.Equal(t, want, got, in)
		require.NoError(t, json.Unmarshal([]byte(in), &theirs), in)
		require.Equal(t, theirs, got, "encoding/json reads %s otherwise", in)
	}
	bad := []string{
		``, `[]`, `"ready"`, `{`, `{"outcome"}`, `{"outcome":}`, `{"outcome":"a",}`, `{"outcome":"a"} x`,
		`{"outcome":1}`, `{"outcome":true}`, `{"outcome":{}}`, `{"session":"!!!"}`, `{"session":5}`,
		"{\"reason\":\"a\nb\"}", `{"reason":"\x"}`, `{"reason":"\u12"}`, `{"reason":"abc`, `{"n":01}`, `{"n":-}`,
		`{"n":1.}`, `{"n":1e}`, `{"n":tru}`, `{"n":nul}`, `{"n":[1,]}`, `{"n":{"a"}}`, `{'outcome':'a'}`,
		`{"n":` + strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2) + `}`,
	}
	for _, in := range bad {
		var got, theirs PrologReply
		require.Error(t, decodePrologReply([]byte(in), &got), "%q", in)
		if !strings.Contains(in, strings.Repeat("[", maxDepth)) { // encoding/json nests up to 10,000
			require.Error(t, json.Unmarshal([]byte(in), &theirs), "encoding/json takes %q", in)
		}
	}
	var e EpilogReply
	require.NoError(t, decodeEpilogReply([]byte(`{"outcome":"released","reason":"ok","session":"x"}`), &e))
	require.Equal(t, EpilogReply{Outcome: "released", Reason: "ok"}, e)
	require.Error(t, decodeEpilogReply([]byte(`{"state":7}`), &e))
}

// Whatever the bytes, the reader never panics, and what it takes encoding/json takes too, with the same fields
// (members whose names match a field's only without regard to case are left out of the comparison: encoding/json
// takes them, the server never writes them).
func FuzzDecodePrologReply(f *testing.F) {
	for _, s := range []string{`{"outcome":"ready","file":"1.0.session","session":"AAEC"}`, `{"a":[{"b":null}],"reason":"\ud83d\ude00"}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ours PrologReply
		if decodePrologReply(data, &ours) != nil {
			return
		}
		folded := false
		_ = readObject(data, func(name string, _ value) error {
			for _, field := range []string{"outcome", "state", "reason", "session", "file"} {
				folded = folded || name != field && strings.EqualFold(name, field)
			}
			return nil
		})
		var theirs PrologReply
		if err := json.Unmarshal(data, &theirs); err != nil {
			t.Fatalf("taken here, refused by encoding/json (%v): %q", err, data)
		}
		if !folded {
			require.Equal(t, theirs, ours, "%q", data)
		}
	})
}
