package world

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// SimAdmin is a client of juice-sim's admin API (/admin/...), for the suites that run the simulator as a process
// (an in-process one is driven through its *juicesim.Sim).
type SimAdmin struct {
	// URL is the simulator's base URL ("http://127.0.0.1:7070"); Token the bearer token it was started with.
	URL, Token string
}

// Sessions lists every session the simulator holds, ended ones included.
func (a SimAdmin) Sessions(ctx context.Context) ([]juiceapi.Session, error) {
	var out []juiceapi.Session
	err := a.do(ctx, http.MethodGet, "/admin/sessions", "", &out)
	return out, err
}

// SetAgent sets an agent's state ("closed" ends its sessions, as a dead agent's; "active" brings it back).
func (a SimAdmin) SetAgent(ctx context.Context, agent, state string) error {
	body, err := json.Marshal(map[string]string{"state": state})
	if err != nil {
		return err
	}
	return a.do(ctx, http.MethodPut, "/admin/agents/"+agent, string(body), nil)
}

func (a SimAdmin) do(ctx context.Context, method, path, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.URL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("juice-sim admin %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("juice-sim admin %s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("juice-sim admin %s %s: %w", method, path, err)
	}
	return nil
}
