// Package wire holds the JSON shapes slurmrestd sends and accepts, per API version family, limited to
// the fields the slurmrest client uses. They are written from the OpenAPI documents that the real
// servers serve (GET /openapi/v3 on Slurm 22.05, 24.11 and 26.05; trimmed copies in
// ../../testdata/openapi), and wirecheck/openapi_test.go checks every JSON name and kind here against
// those documents, so a drifting server shape is caught by `go test`.
//
// Families:
//   - V0038: v0.0.36, v0.0.37, v0.0.38 (Slurm 20.11..23.02): plain integers, job_state a string.
//   - V0040: v0.0.40 .. v0.0.45 (Slurm 23.11..26.05): {set, infinite, number} objects, job_state an
//     array (base state first, then flags), verbose exit codes.
package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Error is one entry of errors[] in every version. The number's name changed over time.
type Error struct {
	ErrorNumber *int   `json:"error_number,omitempty" openapi:"optional"` // v0.0.37+
	ErrorCode   *int   `json:"error_code,omitempty" openapi:"optional"`   // v0.0.36, and v0.0.38's job submit
	Errno       *int   `json:"errno,omitempty" openapi:"optional"`        // v0.0.36
	Error       string `json:"error,omitempty"`
	Description string `json:"description,omitempty" openapi:"optional"`
	Source      string `json:"source,omitempty" openapi:"optional"`
}

// Number returns whichever error number field was sent.
func (e *Error) Number() int {
	switch {
	case e.ErrorNumber != nil:
		return *e.ErrorNumber
	case e.ErrorCode != nil:
		return *e.ErrorCode
	case e.Errno != nil:
		return *e.Errno
	}
	return 0
}

// Warning is one entry of warnings[] (v0.0.39+).
type Warning struct {
	Description string `json:"description,omitempty"`
	Source      string `json:"source,omitempty"`
}

// Int is an integer that also accepts null, "" and a quoted number: v0.0.36 declares most numbers
// as strings and sends null for unset values.
type Int int64

// UnmarshalJSON implements json.Unmarshaler.
func (i *Int) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] >= '0' && b[0] <= '9' || len(b) > 0 && b[0] == '-' {
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(string(b), 64)
			if ferr != nil {
				return err
			}
			n = int64(f)
		}
		*i = Int(n)
		return nil
	}
	if bytes.Equal(b, []byte("null")) {
		*i = 0
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		*i = 0
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return err
	}
	*i = Int(n)
	return nil
}

// NoVal is v0.0.40+'s {set, infinite, number} for an integer that may be unset or infinite.
type NoVal struct {
	Set      bool  `json:"set"`
	Infinite bool  `json:"infinite"`
	Number   int64 `json:"number"`
}

// Value returns the number and whether it is a real value (set, finite).
func (n NoVal) Value() (int64, bool) {
	if !n.Set || n.Infinite {
		return 0, false
	}
	return n.Number, true
}

// NewNoVal returns a set, finite value.
func NewNoVal(n int64) *NoVal { return &NoVal{Set: true, Number: n} }
