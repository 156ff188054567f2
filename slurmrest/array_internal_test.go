package slurmrest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/slurmrest/internal/wire"
)

// The three kinds of record an array shows, as each API version sends them (field shapes as in the recorded
// replies of testdata/replies): a job not in an array, the array's pending remainder, and a split-off element.
func TestArrayFieldsDecodePerVersion(t *testing.T) {
	want := []*ArrayInfo{
		nil,
		{JobID: 40, Pending: "3-11%4"},
		{JobID: 40, TaskID: 0, HasTask: true},
	}
	v3x := []string{ // v0.0.36 sends numbers as strings; v0.0.37/38 as numbers, an unset task id as null
		`{"job_id":39,"array_job_id":0,"array_task_id":null,"array_task_string":""}`,
		`{"job_id":40,"array_job_id":40,"array_task_id":null,"array_task_string":"3-11%4"}`,
		`{"job_id":41,"array_job_id":"40","array_task_id":"0","array_task_string":""}`,
	}
	ns := func(set bool, n int) string {
		return `{"set":` + map[bool]string{true: "true", false: "false"}[set] + `,"infinite":false,"number":` + itoa(n) + `}`
	}
	v4x := []string{
		`{"job_id":39,"array_job_id":` + ns(true, 0) + `,"array_task_id":` + ns(false, 0) + `,"array_task_string":""}`,
		`{"job_id":40,"array_job_id":` + ns(true, 40) + `,"array_task_id":` + ns(false, 0) + `,"array_task_string":"3-11%4"}`,
		`{"job_id":41,"array_job_id":` + ns(true, 40) + `,"array_task_id":` + ns(true, 0) + `,"array_task_string":""}`,
	}
	for i := range want {
		var w3 wire.V0038Job
		require.NoError(t, json.Unmarshal([]byte(v3x[i]), &w3))
		var j3 Job
		v0038Job(&w3, &j3)
		assert.Equal(t, want[i], j3.Array, "v0.0.3x record %d", i)

		var w4 wire.V0040Job
		require.NoError(t, json.Unmarshal([]byte(v4x[i]), &w4))
		var j4 Job
		v0040Job(&w4, &j4)
		assert.Equal(t, want[i], j4.Array, "v0.0.4x record %d", i)
	}
	var j Job
	v0038Job(&wire.V0038Job{JobID: 40, ArrayJobID: 40}, &j)
	assert.True(t, j.Remainder())
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestPendingTasks(t *testing.T) {
	for _, tc := range []struct {
		text string
		max  int
		want []uint32
	}{
		{"0-200", 4, []uint32{0, 1, 2, 3}},
		{"5", 4, []uint32{5}},
		{"3,7-8,20", 10, []uint32{3, 7, 8, 20}},
		{"1-9:4%2", 10, []uint32{1, 5, 9}},
		{"0-4294967293", 2, []uint32{0, 1}},
		{"10-12,14,...", 10, []uint32{10, 11, 12, 14}},
		{"10-12,1...", 10, []uint32{10, 11, 12}},
		{"0x2C", 10, []uint32{2, 3, 5}},
		{"", 4, nil},
	} {
		got, err := (&ArrayInfo{JobID: 1, Pending: tc.text}).PendingTasks(tc.max)
		require.NoError(t, err, tc.text)
		assert.Equal(t, tc.want, got, tc.text)
	}
	_, err := (&ArrayInfo{JobID: 1, Pending: "3-x"}).PendingTasks(2)
	assert.ErrorContains(t, err, `"3-x"`)
}

func TestStillPending(t *testing.T) {
	for _, tc := range []struct {
		text           string
		task           uint32
		pending, known bool
	}{
		{"3-11%4", 3, true, true},
		{"3-11%4", 2, false, true},
		{"1-9:4", 5, true, true},
		{"1-9:4", 6, false, true},
		{"1,4-5,...", 5, true, true},
		{"1,4-5,...", 9, false, false},
		{"0x2C", 3, true, true},
		{"0x2C", 4, false, true},
		{"", 0, false, true},
	} {
		p, k := (&ArrayInfo{JobID: 1, Pending: tc.text}).StillPending(tc.task)
		assert.Equal(t, []bool{tc.pending, tc.known}, []bool{p, k}, "%s has %d", tc.text, tc.task)
	}
}
