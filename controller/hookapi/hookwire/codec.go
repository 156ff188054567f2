package hookwire

import (
	"encoding/base64"
	"errors"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The hooks' requests and replies in JSON, written and read here without encoding/json: its package and the
// reflection it needs (with fmt, which it brings) were about a fifth of an empty Go program's start, and the first
// Marshal and Unmarshal of a process, which is every prolog's only one, another 0.2 ms here (issue 24, P1). The
// server reads and writes the same types with encoding/json (package hookserver); TestCodecAgreesWithEncodingJSON
// checks that each side reads what the other writes, field by field.
//
// Only what the hooks need: a request is written with its fields in a fixed order, and a reply is read from one
// JSON object whose members the reply's fields name (as encoding/json matches them for the server's own output,
// exactly), any other member skipped whatever it holds, so that a newer controller may add one.

// encodePrologRequest is in as JSON.
func encodePrologRequest(in PrologRequest) ([]byte, error) {
	b := appendRun(make([]byte, 0, 96+len(in.Cluster)), in.Cluster, in.JobID, in.Run)
	b = append(b, `,"wait_seconds":`...)
	b, err := appendFloat(b, in.WaitSeconds)
	return append(b, '}'), err
}

// encodeEpilogRequest is in as JSON; an empty exit code is left out, as its omitempty tag says.
func encodeEpilogRequest(in EpilogRequest) ([]byte, error) {
	b := appendRun(make([]byte, 0, 112+len(in.Cluster)+len(in.ExitCode)), in.Cluster, in.JobID, in.Run)
	if in.ExitCode != "" {
		b = append(b, `,"exit_code":`...)
		b = appendString(b, in.ExitCode)
	}
	b = append(b, `,"wait_seconds":`...)
	b, err := appendFloat(b, in.WaitSeconds)
	return append(b, '}'), err
}

// appendRun opens a request's object with the run it names.
func appendRun(b []byte, cluster string, job uint32, run int) []byte {
	b = append(b, `{"cluster":`...)
	b = appendString(b, cluster)
	b = append(b, `,"job_id":`...)
	b = strconv.AppendUint(b, uint64(job), 10)
	b = append(b, `,"run":`...)
	return strconv.AppendInt(b, int64(run), 10)
}

// appendFloat writes f as a JSON number; NaN and the infinities have none.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, errors.New("wait_seconds " + strconv.FormatFloat(f, 'g', -1, 64) + " is not a number JSON can carry")
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64), nil
}

// appendString writes s as a JSON string: quotes, backslashes and control characters escaped, and a byte that is
// not UTF-8 written as U+FFFD, as encoding/json does.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < ' ' || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// decodePrologReply reads a prolog's reply.
func decodePrologReply(data []byte, out *PrologReply) error {
	return readObject(data, func(name string, v value) error {
		switch name {
		case "outcome", "state", "reason":
			return v.stringInto(name, outcomeField(name, &out.Outcome, &out.State, &out.Reason))
		case "file":
			return v.stringInto(name, &out.File)
		case "session":
			if v.null {
				out.Session = nil
				return nil
			}
			var s string
			if err := v.stringInto(name, &s); err != nil {
				return err
			}
			raw, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return errors.New("session: not base64: " + err.Error())
			}
			out.Session = raw
		}
		return nil
	})
}

// decodeEpilogReply reads an epilog's reply.
func decodeEpilogReply(data []byte, out *EpilogReply) error {
	return readObject(data, func(name string, v value) error {
		switch name {
		case "outcome", "state", "reason":
			return v.stringInto(name, outcomeField(name, &out.Outcome, &out.State, &out.Reason))
		}
		return nil
	})
}

// outcomeField is the field of both replies that name ("outcome", "state" or "reason") names.
func outcomeField(name string, outcome, state, reason *string) *string {
	switch name {
	case "outcome":
		return outcome
	case "state":
		return state
	}
	return reason
}

// value is one member's value as readObject found it: a string (unescaped), null, or something else (a number,
// true, false, an object or an array), which a reply's fields never hold.
type value struct {
	str      string
	isString bool
	null     bool
}

// stringInto sets *dst to a string value; null leaves it as it is (encoding/json's rule), anything else is an error.
func (v value) stringInto(name string, dst *string) error {
	switch {
	case v.isString:
		*dst = v.str
	case !v.null:
		return errors.New(name + ": not a string")
	}
	return nil
}

// maxDepth bounds the nesting of a skipped value (encoding/json's own bound is 10,000).
const maxDepth = 1000

// readObject reads data, which must be one JSON object with nothing but white space around it, calling member for
// each of its members in order.
func readObject(data []byte, member func(name string, v value) error) error {
	p := parser{data: data}
	p.space()
	if !p.take('{') {
		return p.fail("an object")
	}
	p.space()
	if !p.take('}') {
		for {
			p.space()
			name, ok := p.string()
			if !ok {
				return p.fail("a member's name")
			}
			p.space()
			if !p.take(':') {
				return p.fail("':'")
			}
			p.space()
			v, ok := p.value()
			if !ok {
				return p.fail("a value")
			}
			if err := member(name, v); err != nil {
				return err
			}
			p.space()
			if p.take('}') {
				break
			}
			if !p.take(',') {
				return p.fail("',' or '}'")
			}
		}
	}
	p.space()
	if p.pos != len(p.data) {
		return p.fail("the end")
	}
	return nil
}

type parser struct {
	data []byte
	pos  int
	// why says what was wrong where it is not "expected ... here" (a bad escape, say).
	why string
}

func (p *parser) fail(want string) error {
	if p.why != "" {
		return errors.New("bad JSON at byte " + strconv.Itoa(p.pos) + ": " + p.why)
	}
	return errors.New("bad JSON at byte " + strconv.Itoa(p.pos) + ": expected " + want)
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) take(c byte) bool {
	if p.pos < len(p.data) && p.data[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *parser) literal(s string) bool {
	if len(p.data)-p.pos >= len(s) && string(p.data[p.pos:p.pos+len(s)]) == s {
		p.pos += len(s)
		return true
	}
	return false
}

// value reads any JSON value, keeping it only when it is a string.
func (p *parser) value() (value, bool) {
	if p.pos < len(p.data) && p.data[p.pos] == '"' {
		s, ok := p.string()
		return value{str: s, isString: true}, ok
	}
	if p.literal("null") {
		return value{null: true}, true
	}
	return value{}, p.skip(0)
}

// skip reads a value that is not a string, or a string inside one, and keeps nothing of it.
func (p *parser) skip(depth int) bool {
	if depth > maxDepth {
		p.why = "nested too deep"
		return false
	}
	if p.pos >= len(p.data) {
		return false
	}
	switch c := p.data[p.pos]; {
	case c == '"':
		_, ok := p.string()
		return ok
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		p.pos++
		p.space()
		if p.take(end) {
			return true
		}
		for {
			p.space()
			if c == '{' {
				if _, ok := p.string(); !ok {
					return false
				}
				p.space()
				if !p.take(':') {
					return false
				}
				p.space()
			}
			if !p.skip(depth + 1) {
				return false
			}
			p.space()
			if p.take(end) {
				return true
			}
			if !p.take(',') {
				return false
			}
		}
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	default:
		return p.number()
	}
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() bool {
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	p.take('-')
	switch {
	case p.take('0'):
	case p.pos < len(p.data) && p.data[p.pos] >= '1' && p.data[p.pos] <= '9':
		digits()
	default:
		return false
	}
	if p.take('.') && digits() == 0 {
		return false
	}
	if p.take('e') || p.take('E') {
		if !p.take('+') {
			p.take('-')
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// string reads a JSON string at p.pos and returns it unescaped. As encoding/json does, a byte that is not UTF-8
// and a lone surrogate become U+FFFD; a control character is refused.
func (p *parser) string() (string, bool) {
	if !p.take('"') {
		return "", false
	}
	start := p.pos
	// Most strings have no escape and are valid UTF-8: taken as they are.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := p.data[start:p.pos]
			p.pos++
			if utf8.Valid(s) {
				return string(s), true
			}
			return string(fixUTF8(s)), true
		}
		if c == '\\' {
			break
		}
		if c < ' ' {
			p.why = "a control character in a string"
			return "", false
		}
		p.pos++
	}
	out := append([]byte(nil), p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(fixUTF8(out)), true
		case c < ' ':
			p.why = "a control character in a string"
			return "", false
		case c != '\\':
			out = append(out, c)
			p.pos++
			continue
		}
		p.pos++
		if p.pos >= len(p.data) {
			return "", false
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				p.why = "a bad \\u escape"
				return "", false
			}
			if utf16.IsSurrogate(r) {
				// A pair makes one character; a lone half is U+FFFD, and what follows it is read on its own.
				save := p.pos
				if p.literal(`\u`) {
					if r2, ok := p.hex4(); ok {
						if both := utf16.DecodeRune(r, r2); both != utf8.RuneError {
							out = utf8.AppendRune(out, both)
							continue
						}
					}
				}
				p.pos = save
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			p.why = "a bad escape \\" + string(rune(e))
			return "", false
		}
	}
	return "", false
}

// hex4 reads the four hex digits of a \u escape.
func (p *parser) hex4() (rune, bool) {
	if len(p.data)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.pos += 4
	return r, true
}

// fixUTF8 replaces each byte of s that is not part of a UTF-8 character with U+FFFD.
func fixUTF8(s []byte) []byte {
	if utf8.Valid(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, s[:size]...)
		}
		s = s[size:]
	}
	return out
}
