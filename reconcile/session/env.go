package session

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// A Grant is what the Juice Controller gave a run: an active session on one agent.
type Grant struct {
	SessionID string
	Address   string // the agent's host:port
	GPUs      []int  // the agent's GPU indexes
}

// Env is what a job's tasks see of their session: the SPANK plugin copies these lines into the task
// environment. JUICE_CFG_OVERRIDE is the legacy Juice client's configuration; it carries no token: the M2M token
// never leaves the controller.
func Env(req request.Request, g Grant) []EnvVar {
	type gpuReq struct {
		VRAMRequired uint64 `json:"vramRequired"`
	}
	reqs := make([]gpuReq, req.GPUs)
	for i := range reqs {
		reqs[i].VRAMRequired = req.VRAM
	}
	idx := make([]string, len(g.GPUs))
	for i, n := range g.GPUs {
		idx[i] = strconv.Itoa(n)
	}
	cfg, _ := json.Marshal(struct {
		ID           string   `json:"id"`
		Servers      []string `json:"servers"`
		Requirements any      `json:"requirements"`
	}{g.SessionID, []string{g.Address}, struct {
		PoolID string   `json:"poolId"`
		GPUs   []gpuReq `json:"gpus"`
	}{req.Pool, reqs}})
	return []EnvVar{
		{Name: "JUICE_SESSION_ID", Value: g.SessionID},
		{Name: "JUICE_AGENT_ADDRESS", Value: g.Address},
		{Name: "JUICE_POOL", Value: req.Pool},
		{Name: "JUICE_GPU_COUNT", Value: strconv.Itoa(req.GPUs)},
		{Name: "JUICE_GPUS", Value: strings.Join(idx, ",")},
		{Name: "JUICE_VRAM", Value: strconv.FormatUint(req.VRAM, 10)},
		{Name: "JUICE_REQUEST", Value: req.String()},
		{Name: "JUICE_CFG_OVERRIDE", Value: string(cfg)},
	}
}
