package slurmrest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/juice-slurm/juice-slurm/slurmrest/internal/wire"
)

// v0040Adapter speaks v0.0.40 .. v0.0.45 (Slurm 23.11 .. 26.05): {set, infinite, number} objects,
// job_state a list, "nothing changed" a 200 with no jobs and last_update 0, a bad token 511, an
// unknown job 404.
type v0040Adapter struct {
	ver   string
	minor int
}

func (a *v0040Adapter) version() string  { return a.ver }
func (a *v0040Adapter) canRequeue() bool { return a.minor >= 45 }

func (a *v0040Adapter) req(method, path string, body any, idempotent bool) request {
	return request{method: method, path: "/slurm/" + a.ver + path, body: body, idempotent: idempotent, version: a.ver}
}

func jobPath(id uint32) string { return "/job/" + strconv.FormatUint(uint64(id), 10) }

func (a *v0040Adapter) ping(ctx context.Context, c *Client) error {
	r := a.req(http.MethodGet, "/ping/", nil, true)
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	var out wire.V0040PingResponse
	if err := decode(r, resp, &out); err != nil {
		return err
	}
	if out.Meta != nil {
		c.setRelease(out.Meta.Slurm.Release)
	}
	if err := check(r, resp, out.Errors); err != nil {
		return err
	}
	var why []string
	for _, p := range out.Pings {
		if (p.Responding != nil && *p.Responding) || (p.Responding == nil && strings.EqualFold(p.Pinged, "UP")) {
			return nil
		}
		if p.Status != "" {
			why = append(why, p.Status)
		}
	}
	// 26.05 says why; a refused token shows here as "Protocol authentication error".
	for _, w := range why {
		if strings.Contains(strings.ToLower(w), "authentication") {
			return fmt.Errorf("%w: %s: %w", ErrControllerDown, w, ErrUnauthorized)
		}
	}
	return fmt.Errorf("%w: %d controller(s), none responding %v (on Slurm 24.11 a refused token looks the same)",
		ErrControllerDown, len(out.Pings), why)
}

func (a *v0040Adapter) listJobs(ctx context.Context, c *Client, since time.Time) (JobList, error) {
	path := "/jobs/"
	if !since.IsZero() {
		// v0.0.40/41 refuse a bare epoch number ("Parsing of N for timestamp failed"); Slurm's
		// parse_time takes "uts<epoch>" in every release, independent of the server's time zone.
		if a.minor <= 41 {
			path += "?update_time=uts" + strconv.FormatInt(since.Unix(), 10)
		} else {
			path += "?update_time=" + strconv.FormatInt(since.Unix(), 10)
		}
	}
	r := a.req(http.MethodGet, path, nil, true)
	start := time.Now()
	resp, err := c.do(ctx, r)
	if err != nil {
		return JobList{}, err
	}
	if resp.status == http.StatusNotModified { // not seen on these versions, but harmless
		return JobList{LastUpdate: since, Unchanged: true}, nil
	}
	var out wire.V0040JobInfoResponse
	if err := decode(r, resp, &out); err != nil {
		return JobList{}, err
	}
	if err := check(r, resp, out.Errors); err != nil {
		return JobList{}, err
	}
	last, lastOK := out.LastUpdate.Value()
	if !since.IsZero() && len(out.Jobs) == 0 && (!lastOK || last == 0) {
		// "No job changes since update_time": jobs [] and last_update 0.
		return JobList{LastUpdate: since, Unchanged: true}, nil
	}
	jobs := make([]Job, len(out.Jobs))
	for i := range out.Jobs {
		v0040Job(&out.Jobs[i], &jobs[i])
	}
	lu := start.Add(-c.margin).Truncate(time.Second)
	if lastOK && last > 0 {
		lu = time.Unix(last, 0) // the server's own time of the last change
	}
	return JobList{Jobs: jobs, LastUpdate: lu}, nil
}

func (a *v0040Adapter) getJob(ctx context.Context, c *Client, id uint32) (*Job, error) {
	r := a.req(http.MethodGet, jobPath(id), nil, true)
	out, err := exchange(ctx, c, r, func(o *wire.V0040JobInfoResponse) []wire.Error { return o.Errors })
	if err != nil {
		return nil, err
	}
	return findJob(out.Jobs, id, func(j *wire.V0040Job) uint32 { return uint32(j.JobID) }, v0040Job)
}

func (a *v0040Adapter) updateJob(ctx context.Context, c *Client, id uint32, u JobUpdate) error {
	body := wire.V0040JobDesc{Comment: u.Comment, AdminComment: u.AdminComment, Hold: u.Hold}
	if u.BeginNow {
		body.BeginTime = wire.NewNoVal(time.Now().Unix())
	}
	r := a.req(http.MethodPost, jobPath(id), body, true)
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	var out wire.V0040JobPostResponse
	if err := decode(r, resp, &out); err != nil {
		return err
	}
	if err := check(r, resp, out.Errors); err != nil {
		return err
	}
	return resultsError(r, resp, out.Results)
}

func resultsError(r request, resp *response, results []wire.V0040JobUpdateResult) error {
	var errs []wire.Error
	for _, res := range results {
		if res.ErrorCode != 0 {
			n := res.ErrorCode
			errs = append(errs, wire.Error{ErrorNumber: &n, Error: res.Error, Description: res.Why,
				Source: "job " + strconv.FormatInt(int64(res.JobID), 10)})
		}
	}
	return check(r, resp, errs)
}

func (a *v0040Adapter) cancelJob(ctx context.Context, c *Client, id uint32) error {
	r := a.req(http.MethodDelete, jobPath(id), nil, true)
	resp, err := c.do(ctx, r)
	if err != nil {
		return ignoreAlreadyDone(err)
	}
	if len(resp.body) == 0 {
		return nil
	}
	var out wire.V0040KillResponse
	if err := decode(r, resp, &out); err != nil {
		return err
	}
	errs := out.Errors
	for _, st := range out.Status { // 26.05: per-job results, 2021 for a job already done
		if st.Error.Code != 0 {
			n := st.Error.Code
			errs = append(errs, wire.Error{ErrorNumber: &n, Error: st.Error.String, Description: st.Error.Message})
		}
	}
	return ignoreAlreadyDone(check(r, resp, errs))
}

func (a *v0040Adapter) submitJob(ctx context.Context, c *Client, s JobSubmission) (uint32, error) {
	desc := wire.V0040JobDesc{
		Name:                    s.Name,
		Partition:               s.Partition,
		Environment:             s.env(),
		CurrentWorkingDirectory: s.workDir(),
		StandardOutput:          s.stdOut(),
	}
	if s.Comment != "" {
		desc.Comment = &s.Comment
	}
	if s.AdminComment != "" {
		desc.AdminComment = &s.AdminComment
	}
	if s.Hold {
		hold := true
		desc.Hold = &hold
	}
	if m := s.timeLimitMinutes(); m > 0 {
		desc.TimeLimit = wire.NewNoVal(m)
	}
	if !s.Begin.IsZero() {
		desc.BeginTime = wire.NewNoVal(s.Begin.Unix())
	}
	body := wire.V0040JobSubmitReq{Job: desc}
	if a.minor <= 40 {
		body.Script = s.Script // deprecated at the top level from v0.0.41
	} else {
		body.Job.Script = s.Script
	}
	r := a.req(http.MethodPost, "/job/submit", body, false)
	resp, err := c.do(ctx, r)
	if err != nil {
		return 0, err
	}
	var out wire.V0040JobSubmitResponse
	if err := decode(r, resp, &out); err != nil {
		return 0, err
	}
	if err := check(r, resp, out.Errors); err != nil {
		return 0, err
	}
	if out.JobID <= 0 {
		return 0, fmt.Errorf("slurmrest: %s %s: reply without a job id", r.method, r.path)
	}
	return uint32(out.JobID), nil
}

func (a *v0040Adapter) requeueJob(ctx context.Context, c *Client, id uint32) error {
	if !a.canRequeue() {
		return fmt.Errorf("slurmrest: requeue with %s: %w (v0.0.45+; use scontrol requeue)", a.ver, ErrUnsupported)
	}
	r := a.req(http.MethodGet, jobPath(id)+"/requeue", nil, false)
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	var out wire.V0045JobRequeueResponse
	if err := decode(r, resp, &out); err != nil {
		return err
	}
	if err := check(r, resp, out.Errors); err != nil {
		return err
	}
	return resultsError(r, resp, out.Status)
}

func noValTime(n wire.NoVal) time.Time {
	if v, ok := n.Value(); ok {
		return unixOrZero(v)
	}
	return time.Time{}
}

func v0040Job(w *wire.V0040Job, j *Job) {
	j.ID = uint32(w.JobID)
	j.Run = int(w.RestartCnt)
	j.State, j.StateFlags = normalizeState(w.JobState)
	j.StateReason = w.StateReason
	j.UserName = w.UserName
	j.Account = w.Account
	j.UserID = uint32(w.UserID)
	j.Partition = w.Partition
	j.Nodes = w.Nodes
	j.Batch = w.BatchFlag
	j.Name = w.Name
	j.Comment = w.Comment
	j.AdminComment = w.AdminComment
	if v, ok := w.Priority.Value(); ok && v > 0 {
		j.Priority = uint64(v)
	}
	j.SubmitTime = noValTime(w.SubmitTime)
	j.EligibleTime = noValTime(w.EligibleTime)
	j.StartTime = noValTime(w.StartTime)
	j.EndTime = noValTime(w.EndTime)
	if j.State.IsFinished() || j.State == StateCompleting {
		j.ExitCode = v0040ExitStatus(&w.ExitCode)
	}
	array, _ := w.ArrayJobID.Value()
	task, hasTask := w.ArrayTaskID.Value()
	j.Array = arrayInfo(array, task, hasTask, w.ArrayTaskString)
}

func v0040ExitStatus(e *wire.V0040ExitCode) ExitStatus {
	var out ExitStatus
	signaled := false
	for _, s := range e.Status {
		switch s {
		case "SIGNALED":
			signaled = true
		case "CORE_DUMPED":
			signaled = true
			out.CoreDumped = true
		}
	}
	if signaled {
		if v, ok := e.Signal.ID.Value(); ok {
			out.Signal = int(v)
		}
		return out
	}
	out.Exited = true
	if v, ok := e.ReturnCode.Value(); ok {
		out.Code = int(v)
	}
	return out
}

func (a *v0040Adapter) canTrackStates() bool { return true }

// StatesBatch is how many job ids one jobs/state request asks for. slurmrestd itself took 3,000 ids in one URL
// (54 KB) on 26.05.5; 400 keeps the URL near 7 KB, under the 8 KB request-line limit of common reverse proxies
// (nginx's large_client_header_buffers) a site may put in front of slurmrestd.
const StatesBatch = 400

// jobStates asks GET jobs/state/ for the ids, StatesBatch at a time (nil ids: every job, in one request). The documented form is a CSV list
// (job_id=1,2), but 24.11.5 refuses it (400 "Unable to parse query") and 26.05.5 fails it (500 "Unspecified
// error"); both take the parameter repeated (job_id=1&job_id=2), the form used here.
func (a *v0040Adapter) jobStates(ctx context.Context, c *Client, ids []uint32) ([]JobStatus, error) {
	out := make([]JobStatus, 0, len(ids))
	all := ids == nil // every job: one request without job_id
	for all || len(ids) > 0 {
		batch := ids[:min(len(ids), StatesBatch)]
		ids = ids[len(batch):]
		var q strings.Builder
		for i, id := range batch {
			if i > 0 {
				q.WriteByte('&')
			}
			q.WriteString("job_id=")
			q.WriteString(strconv.FormatUint(uint64(id), 10))
		}
		path := "/jobs/state/"
		if !all {
			path += "?" + q.String()
		}
		all = false
		r := a.req(http.MethodGet, path, nil, true)
		resp, err := c.do(ctx, r)
		if err != nil {
			return nil, err
		}
		var reply wire.V0040JobStatesResponse
		if err := decode(r, resp, &reply); err != nil {
			return nil, err
		}
		if err := check(r, resp, reply.Errors); err != nil {
			return nil, err
		}
		for _, j := range reply.Jobs {
			s, err := parseJobStatus(j.JobID, j.State)
			if err != nil {
				return nil, fmt.Errorf("slurmrest: %s %s: %w", r.method, "/jobs/state/", err)
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// parseJobStatus reads a jobs/state entry: job_id is "123" for a job, "124_3" for an array's element (the
// element's own job id, then its task id).
func parseJobStatus(id string, words []string) (JobStatus, error) {
	var s JobStatus
	num, task, hasTask := strings.Cut(id, "_")
	n, err := strconv.ParseUint(num, 10, 32)
	if err != nil || n == 0 {
		return s, fmt.Errorf("job_id %q is not a job id", id)
	}
	s.ID = uint32(n)
	if hasTask {
		t, err := strconv.ParseUint(task, 10, 32)
		if err != nil {
			return s, fmt.Errorf("job_id %q: task %q is not a task id", id, task)
		}
		s.Task, s.HasTask = uint32(t), true
	}
	s.State, s.Flags = normalizeState(words)
	if s.State == "" {
		return s, fmt.Errorf("job_id %q has no state", id)
	}
	return s, nil
}
