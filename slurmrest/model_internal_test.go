package slurmrest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNormalizeState(t *testing.T) {
	for _, tc := range []struct {
		words []string
		state JobState
		flags []string
	}{
		{[]string{"PENDING"}, StatePending, nil},
		{[]string{"RUNNING"}, StateRunning, nil},
		{[]string{"RUNNING", "CONFIGURING"}, StateConfiguring, []string{"CONFIGURING"}},
		{[]string{"CONFIGURING"}, StateConfiguring, []string{"CONFIGURING"}}, // v0.0.38
		{[]string{"CANCELLED", "COMPLETING"}, StateCompleting, []string{"COMPLETING"}},
		{[]string{"COMPLETING"}, StateCompleting, []string{"COMPLETING"}}, // v0.0.38
		{[]string{"COMPLETED"}, StateCompleted, nil},
		{[]string{"PENDING", "REQUEUED"}, StatePending, []string{"REQUEUED"}},
		{[]string{"REQUEUED"}, StatePending, []string{"REQUEUED"}},
		{[]string{"OUT_OF_MEMORY"}, StateOutOfMemory, nil},
		{[]string{"node_fail"}, StateNodeFail, nil},
		{nil, "", nil},
	} {
		s, f := normalizeState(tc.words)
		assert.Equal(t, tc.state, s, "%v", tc.words)
		assert.Equal(t, tc.flags, f, "%v", tc.words)
	}
	assert.True(t, StateTimeout.IsFinished())
	assert.False(t, StateCompleting.IsFinished())
	assert.True(t, StateCompleting.IsActive())
	assert.False(t, StatePending.IsActive())
}

func TestExitStatus(t *testing.T) {
	assert.Equal(t, ExitStatus{Exited: true, Code: 3}, ExitStatusFromRaw(768))
	assert.Equal(t, ExitStatus{Exited: true}, ExitStatusFromRaw(0))
	assert.Equal(t, ExitStatus{Signal: 9}, ExitStatusFromRaw(9))
	assert.Equal(t, ExitStatus{Signal: 11, CoreDumped: true}, ExitStatusFromRaw(139))
	for _, raw := range []int{0, 256, 768, 9, 15, 139} {
		assert.Equal(t, raw, ExitStatusFromRaw(raw).Raw())
	}
}
