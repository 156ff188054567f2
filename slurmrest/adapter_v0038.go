package slurmrest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/juice-slurm/juice-slurm/slurmrest/internal/wire"
)

// v0038Adapter speaks v0.0.36, v0.0.37 and v0.0.38 (Slurm 22.05): plain integers, job_state a string,
// a 304 with an empty body when no job changed, every failure a 500.
type v0038Adapter struct{ ver string }

func (a *v0038Adapter) version() string  { return a.ver }
func (a *v0038Adapter) canRequeue() bool { return false }

// canTrackStates: v0.0.3x has no jobs/state endpoint; the caller lists the jobs instead.
func (a *v0038Adapter) canTrackStates() bool { return false }

func (a *v0038Adapter) req(method, path string, body any, idempotent bool) request {
	return request{method: method, path: "/slurm/" + a.ver + path, body: body, idempotent: idempotent, version: a.ver}
}

func (a *v0038Adapter) ping(ctx context.Context, c *Client) error {
	r := a.req(http.MethodGet, "/ping", nil, true)
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	var out wire.V0038PingResponse
	if err := decode(r, resp, &out); err != nil {
		return err
	}
	if out.Meta != nil {
		c.setRelease(out.Meta.Slurm.Release)
	}
	if err := check(r, resp, out.Errors); err != nil {
		return err
	}
	for _, p := range out.Pings {
		if strings.EqualFold(p.Ping, "UP") {
			return nil
		}
	}
	return fmt.Errorf("%w: %d controller(s), none UP", ErrControllerDown, len(out.Pings))
}

func (a *v0038Adapter) listJobs(ctx context.Context, c *Client, since time.Time) (JobList, error) {
	path := "/jobs"
	// v0.0.36 has no update_time: every listing is a full one and never Unchanged.
	if !since.IsZero() && a.ver != "v0.0.36" {
		path += "?update_time=" + strconv.FormatInt(since.Unix(), 10)
	}
	r := a.req(http.MethodGet, path, nil, true)
	start := time.Now()
	resp, err := c.do(ctx, r)
	if err != nil {
		return JobList{}, err
	}
	if resp.status == http.StatusNotModified {
		return JobList{LastUpdate: since, Unchanged: true}, nil
	}
	var out wire.V0038JobsResponse
	if err := decode(r, resp, &out); err != nil {
		return JobList{}, err
	}
	if err := check(r, resp, out.Errors); err != nil {
		return JobList{}, err
	}
	jobs := make([]Job, len(out.Jobs))
	for i := range out.Jobs {
		v0038Job(&out.Jobs[i], &jobs[i])
	}
	// The reply carries no server time: use the client's clock, minus a margin for clock skew.
	return JobList{Jobs: jobs, LastUpdate: start.Add(-c.margin).Truncate(time.Second)}, nil
}

func (a *v0038Adapter) getJob(ctx context.Context, c *Client, id uint32) (*Job, error) {
	r := a.req(http.MethodGet, "/job/"+strconv.FormatUint(uint64(id), 10), nil, true)
	out, err := exchange(ctx, c, r, func(o *wire.V0038JobsResponse) []wire.Error { return o.Errors })
	if err != nil {
		return nil, err
	}
	return findJob(out.Jobs, id, func(j *wire.V0038Job) uint32 { return uint32(j.JobID) }, v0038Job)
}

func (a *v0038Adapter) updateJob(ctx context.Context, c *Client, id uint32, u JobUpdate) error {
	if u.AdminComment != nil {
		// v0.0.36..38 reject the key ("Unknown key admin_comment", error 9001 in a 200 reply).
		return fmt.Errorf("slurmrest: admin comment with %s: %w (use scontrol update or job_submit.lua)", a.ver, ErrUnsupported)
	}
	body := wire.V0038JobProperties{Comment: u.Comment, AdminComment: u.AdminComment, Hold: u.Hold}
	if u.BeginNow {
		body.BeginTime = "now"
	}
	r := a.req(http.MethodPost, "/job/"+strconv.FormatUint(uint64(id), 10), body, true)
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	if len(resp.body) == 0 {
		return nil
	}
	var out wire.V0038ErrorsResponse
	if err := decode(r, resp, &out); err != nil {
		return err
	}
	return check(r, resp, out.Errors)
}

func (a *v0038Adapter) cancelJob(ctx context.Context, c *Client, id uint32) error {
	r := a.req(http.MethodDelete, "/job/"+strconv.FormatUint(uint64(id), 10), nil, true)
	resp, err := c.do(ctx, r)
	if err == nil && len(resp.body) > 0 {
		var out wire.V0038ErrorsResponse
		if err = decode(r, resp, &out); err == nil {
			err = check(r, resp, out.Errors)
		}
	}
	return ignoreAlreadyDone(err)
}

func (a *v0038Adapter) submitJob(ctx context.Context, c *Client, s JobSubmission) (uint32, error) {
	env := make(map[string]string, len(s.env()))
	for _, kv := range s.env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	body := wire.V0038JobSubmission{Script: s.Script, Job: wire.V0038JobProperties{
		Name:                    s.Name,
		Partition:               s.Partition,
		Environment:             env,
		CurrentWorkingDirectory: s.workDir(),
		StandardOutput:          s.stdOut(),
		TimeLimit:               s.timeLimitMinutes(),
	}}
	if s.Comment != "" {
		body.Job.Comment = &s.Comment
	}
	if s.AdminComment != "" {
		return 0, fmt.Errorf("slurmrest: admin comment with %s: %w", a.ver, ErrUnsupported)
	}
	if s.Hold {
		hold := true
		body.Job.Hold = &hold
	}
	if !s.Begin.IsZero() {
		// v0.0.38's document says an integer, but 22.05.8 refuses one (2054 "Unable to parse time"); Slurm's
		// parse_time takes "uts<epoch>" on v0.0.36 to v0.0.38.
		body.Job.BeginTime = "uts" + strconv.FormatInt(s.Begin.Unix(), 10)
	}
	r := a.req(http.MethodPost, "/job/submit", body, false)
	resp, err := c.do(ctx, r)
	if err != nil {
		return 0, err
	}
	var out wire.V0038JobSubmissionResponse
	if err := decode(r, resp, &out); err != nil {
		return 0, err
	}
	// With a job id the job exists: errors[] then only says why it cannot start yet (2042 held,
	// 2068 node not available, ...); slurmrestd v0.0.40+ reports those as warnings.
	if out.JobID > 0 {
		if len(out.Errors) > 0 {
			c.log.V(1).Info("job submitted with a notice", "job", int64(out.JobID), "notice",
				newAPIError(r, resp.status, nil, out.Errors).Error())
		}
		return uint32(out.JobID), nil
	}
	if err := check(r, resp, out.Errors); err != nil {
		return 0, err
	}
	if out.JobID <= 0 {
		return 0, fmt.Errorf("slurmrest: %s %s: reply without a job id", r.method, r.path)
	}
	return uint32(out.JobID), nil
}

func (a *v0038Adapter) jobStates(context.Context, *Client, []uint32) ([]JobStatus, error) {
	return nil, fmt.Errorf("slurmrest: job states with %s: %w (v0.0.40+; list the jobs instead)", a.ver, ErrUnsupported)
}

func (a *v0038Adapter) requeueJob(context.Context, *Client, uint32) error {
	return fmt.Errorf("slurmrest: requeue with %s: %w (use scontrol requeue)", a.ver, ErrUnsupported)
}

func v0038Job(w *wire.V0038Job, j *Job) {
	j.ID = uint32(w.JobID)
	j.Run = int(w.RestartCnt)
	j.State, j.StateFlags = normalizeState([]string{w.JobState})
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
	if w.Priority > 0 {
		j.Priority = uint64(w.Priority)
	}
	j.SubmitTime = unixOrZero(int64(w.SubmitTime))
	j.EligibleTime = unixOrZero(int64(w.EligibleTime))
	j.StartTime = unixOrZero(int64(w.StartTime))
	j.EndTime = unixOrZero(int64(w.EndTime))
	if j.State.IsFinished() || j.State == StateCompleting {
		j.ExitCode = ExitStatusFromRaw(int(w.ExitCode))
	}
	var task int64
	if w.ArrayTaskID != nil {
		task = int64(*w.ArrayTaskID)
	}
	j.Array = arrayInfo(int64(w.ArrayJobID), task, w.ArrayTaskID != nil, w.ArrayTaskString)
}

// ignoreAlreadyDone makes cancelling a job that has already ended a success.
func ignoreAlreadyDone(err error) error {
	var apiErr *APIError
	if errors.As(err, &apiErr) && (apiErr.HasNumber(errnoAlreadyDone) || apiErr.HasNumber(errnoJobFinished)) {
		return nil
	}
	return err
}
