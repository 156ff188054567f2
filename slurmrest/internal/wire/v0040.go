package wire

// V0040Meta is v0.0.4x_openapi_meta (the parts we log).
type V0040Meta struct {
	Plugin struct {
		Type       string `json:"type"`
		Name       string `json:"name"`
		DataParser string `json:"data_parser"`
	} `json:"plugin"`
	Slurm struct {
		Release string `json:"release"`
		Cluster string `json:"cluster"`
	} `json:"slurm"`
}

// V0040ExitCode is v0.0.4x_process_exit_code_verbose.
type V0040ExitCode struct {
	// Status: INVALID, PENDING, SUCCESS, ERROR, SIGNALED, CORE_DUMPED.
	Status     []string `json:"status"`
	ReturnCode NoVal    `json:"return_code"`
	Signal     struct {
		ID   NoVal  `json:"id"`
		Name string `json:"name"`
	} `json:"signal"`
}

// V0040Job is v0.0.40_job_info .. v0.0.45_job_info (the fields used keep their names and kinds).
type V0040Job struct {
	JobID        int64         `json:"job_id"`
	JobState     []string      `json:"job_state"`
	StateReason  string        `json:"state_reason"`
	UserName     string        `json:"user_name"`
	Account      string        `json:"account"`
	UserID       int64         `json:"user_id"`
	Partition    string        `json:"partition"`
	Nodes        string        `json:"nodes"`
	BatchFlag    bool          `json:"batch_flag"`
	Name         string        `json:"name"`
	Comment      string        `json:"comment"`
	AdminComment string        `json:"admin_comment"`
	Priority     NoVal         `json:"priority"`
	SubmitTime   NoVal         `json:"submit_time"`
	EligibleTime NoVal         `json:"eligible_time"`
	StartTime    NoVal         `json:"start_time"`
	EndTime      NoVal         `json:"end_time"`
	ExitCode     V0040ExitCode `json:"exit_code"`
	RestartCnt   int64         `json:"restart_cnt"`
	// An array's element: see V0038Job; array_task_id is not set while the record is the pending remainder.
	ArrayJobID      NoVal  `json:"array_job_id"`
	ArrayTaskID     NoVal  `json:"array_task_id"`
	ArrayTaskString string `json:"array_task_string"`
}

// V0040JobInfoResponse is v0.0.4x_openapi_job_info_resp (GET jobs/, GET job/{id}).
type V0040JobInfoResponse struct {
	Jobs       []V0040Job `json:"jobs"`
	LastUpdate NoVal      `json:"last_update"`
	Meta       *V0040Meta `json:"meta,omitempty"`
	Errors     []Error    `json:"errors"`
	Warnings   []Warning  `json:"warnings"`
}

// V0040Ping is v0.0.4x_controller_ping: v0.0.40 has pinged ("UP"/"DOWN"), v0.0.41+ adds responding,
// v0.0.45 drops pinged and adds status.
type V0040Ping struct {
	Hostname   string `json:"hostname"`
	Pinged     string `json:"pinged" openapi:"optional"`
	Responding *bool  `json:"responding" openapi:"optional"`
	Primary    *bool  `json:"primary" openapi:"optional"`
	Mode       string `json:"mode" openapi:"optional"`
	Status     string `json:"status" openapi:"optional"`
	Latency    int64  `json:"latency"`
}

// V0040PingResponse is v0.0.4x_openapi_ping_array_resp.
type V0040PingResponse struct {
	Pings    []V0040Ping `json:"pings"`
	Meta     *V0040Meta  `json:"meta,omitempty"`
	Errors   []Error     `json:"errors"`
	Warnings []Warning   `json:"warnings"`
}

// V0040JobDesc is the part of v0.0.4x_job_desc_msg used to submit and to update a job.
type V0040JobDesc struct {
	Script                  string   `json:"script,omitempty"`
	Name                    string   `json:"name,omitempty"`
	Partition               string   `json:"partition,omitempty"`
	Comment                 *string  `json:"comment,omitempty"`
	AdminComment            *string  `json:"admin_comment,omitempty"`
	Environment             []string `json:"environment,omitempty"` // an array of NAME=value since v0.0.39
	CurrentWorkingDirectory string   `json:"current_working_directory,omitempty"`
	StandardOutput          string   `json:"standard_output,omitempty"`
	Hold                    *bool    `json:"hold,omitempty"`
	BeginTime               *NoVal   `json:"begin_time,omitempty"`
	TimeLimit               *NoVal   `json:"time_limit,omitempty"` // minutes
}

// V0040JobSubmitReq is v0.0.4x_job_submit_req: the script is top-level on v0.0.40, in job from v0.0.41.
type V0040JobSubmitReq struct {
	Script string       `json:"script,omitempty"`
	Job    V0040JobDesc `json:"job"`
}

// V0040JobSubmitResponse is v0.0.4x_openapi_job_submit_response.
type V0040JobSubmitResponse struct {
	JobID            int64      `json:"job_id"`
	StepID           string     `json:"step_id"`
	JobSubmitUserMsg string     `json:"job_submit_user_msg"`
	Meta             *V0040Meta `json:"meta,omitempty"`
	Errors           []Error    `json:"errors"`
	Warnings         []Warning  `json:"warnings"`
}

// V0040JobUpdateResult is one entry of v0.0.4x_openapi_job_post_response.results.
type V0040JobUpdateResult struct {
	JobID     Int    `json:"job_id"`
	StepID    string `json:"step_id"`
	Error     string `json:"error"`
	ErrorCode int    `json:"error_code"`
	Why       string `json:"why"`
}

// V0040JobPostResponse is v0.0.4x_openapi_job_post_response (POST job/{id}).
type V0040JobPostResponse struct {
	Results  []V0040JobUpdateResult `json:"results"`
	Meta     *V0040Meta             `json:"meta,omitempty"`
	Errors   []Error                `json:"errors"`
	Warnings []Warning              `json:"warnings"`
}

// V0040KillStatus is one entry of the status[] that DELETE job/{id} returns on v0.0.42+ (Slurm 26.05).
type V0040KillStatus struct {
	Error struct {
		String  string `json:"string"`
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	StepID string `json:"step_id"`
	JobID  NoVal  `json:"job_id"`
}

// V0040KillResponse is v0.0.4x_openapi_kill_job_resp / openapi_resp (DELETE job/{id}, GET requeue).
type V0040KillResponse struct {
	Status   []V0040KillStatus `json:"status" openapi:"optional"` // not in v0.0.40/41 (openapi_resp)
	Meta     *V0040Meta        `json:"meta,omitempty"`
	Errors   []Error           `json:"errors"`
	Warnings []Warning         `json:"warnings"`
}

// V0045JobRequeueResponse is v0.0.45_openapi_job_requeue_resp (GET job/{id}/requeue).
type V0045JobRequeueResponse struct {
	Status   []V0040JobUpdateResult `json:"status"`
	Meta     *V0040Meta             `json:"meta,omitempty"`
	Errors   []Error                `json:"errors"`
	Warnings []Warning              `json:"warnings"`
}

// V0040JobStatesResponse is what GET jobs/state/ answers on v0.0.40 .. v0.0.45. The OpenAPI documents of 24.11
// and 26.05 name openapi_job_info_resp as its schema, but the daemons send openapi_job_state_resp (seen on
// 24.11.5 and 26.05.5, testdata/replies/*/job_states.json): job_id is a string ("123", or "124_3" for an array's
// element: its own job id, then its task id) and state the job's state words. So it has no wirecheck entry.
type V0040JobStatesResponse struct {
	Jobs []struct {
		JobID string   `json:"job_id"`
		State []string `json:"state"`
	} `json:"jobs"`
	Meta     *V0040Meta `json:"meta,omitempty"`
	Errors   []Error    `json:"errors"`
	Warnings []Warning  `json:"warnings"`
}
