package wire

// V0038Meta is v0.0.3x's meta (plugin and Slurm release).
type V0038Meta struct {
	Plugin struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"plugin"`
	Slurm struct {
		Release string `json:"release"`
	} `json:"Slurm"`
}

// V0038Job is v0.0.38_job_response_properties (v0.0.36/37 have the same names; v0.0.36 declares the
// numbers as strings and sends null for unset ones, hence Int).
type V0038Job struct {
	JobID        Int    `json:"job_id"`
	JobState     string `json:"job_state"`
	StateReason  string `json:"state_reason"`
	UserName     string `json:"user_name"`
	Account      string `json:"account"`
	UserID       Int    `json:"user_id"`
	Partition    string `json:"partition"`
	Nodes        string `json:"nodes"`
	BatchFlag    bool   `json:"batch_flag"`
	Name         string `json:"name"`
	Comment      string `json:"comment"`
	AdminComment string `json:"admin_comment"`
	Priority     Int    `json:"priority"`
	SubmitTime   Int    `json:"submit_time"`
	EligibleTime Int    `json:"eligible_time"`
	StartTime    Int    `json:"start_time"`
	EndTime      Int    `json:"end_time"`
	ExitCode     Int    `json:"exit_code"` // raw wait status
	RestartCnt   Int    `json:"restart_cnt"`
	// An array's element: array_job_id is the array's id (0 for a job that is not in an array), array_task_id
	// the element's task id (null while the record is the array's pending remainder, or not in an array), and
	// array_task_string the task ids still pending in that remainder ("3-200", "5,7-9%4").
	ArrayJobID      Int    `json:"array_job_id"`
	ArrayTaskID     *Int   `json:"array_task_id"`
	ArrayTaskString string `json:"array_task_string"`
}

// V0038JobsResponse is v0.0.38_jobs_response (GET jobs, GET job/{id}).
type V0038JobsResponse struct {
	Meta   *V0038Meta `json:"meta,omitempty" openapi:"optional"` // not in v0.0.36/37
	Errors []Error    `json:"errors"`
	Jobs   []V0038Job `json:"jobs"`
}

// V0038Ping is v0.0.38_ping.
type V0038Ping struct {
	Hostname string `json:"hostname"`
	Ping     string `json:"ping"` // UP or DOWN
	Mode     string `json:"mode"`
	Status   Int    `json:"status"`
}

// V0038PingResponse is v0.0.38_pings.
type V0038PingResponse struct {
	Meta   *V0038Meta  `json:"meta,omitempty" openapi:"optional"` // not in v0.0.36/37
	Errors []Error     `json:"errors"`
	Pings  []V0038Ping `json:"pings"`
}

// V0038JobProperties is the part of v0.0.38_job_properties used to submit and to update a job.
// begin_time is an integer in v0.0.38's document, a string in v0.0.36's; "now" is accepted by both.
type V0038JobProperties struct {
	Name                    string            `json:"name,omitempty"`
	Partition               string            `json:"partition,omitempty"`
	Comment                 *string           `json:"comment,omitempty"`
	AdminComment            *string           `json:"admin_comment,omitempty" openapi:"optional"` // not in the v0.0.3x documents
	Environment             map[string]string `json:"environment,omitempty"`                      // an object until v0.0.38
	CurrentWorkingDirectory string            `json:"current_working_directory,omitempty"`
	StandardOutput          string            `json:"standard_output,omitempty" openapi:"optional"` // not in v0.0.36
	Hold                    *bool             `json:"hold,omitempty"`
	BeginTime               any               `json:"begin_time,omitempty"`
	TimeLimit               int64             `json:"time_limit,omitempty"` // minutes
}

// V0038JobSubmission is v0.0.38_job_submission.
type V0038JobSubmission struct {
	Script string             `json:"script"`
	Job    V0038JobProperties `json:"job"`
}

// V0038JobSubmissionResponse is v0.0.38_job_submission_response.
type V0038JobSubmissionResponse struct {
	Meta             *V0038Meta `json:"meta,omitempty" openapi:"optional"` // not in v0.0.36/37
	Errors           []Error    `json:"errors"`
	JobID            Int        `json:"job_id"`
	StepID           string     `json:"step_id"`
	JobSubmitUserMsg string     `json:"job_submit_user_msg"`
}

// V0038ErrorsResponse is a reply that only carries errors (update, cancel).
type V0038ErrorsResponse struct {
	Meta   *V0038Meta `json:"meta,omitempty" openapi:"optional"` // not in v0.0.36/37
	Errors []Error    `json:"errors"`
}
