package juicesim_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
)

// Start the simulator in-process and point the client at it.
func ExampleStartServer() {
	srv, err := juicesim.StartServer(juicesim.Config{
		Token: "m2m_example",
		Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 4, 8, 80*vram.GiB)},
	}, logr.Discard())
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	dir, _ := os.MkdirTemp("", "juicesim")
	defer os.RemoveAll(dir)
	tokenFile := filepath.Join(dir, "token")
	_ = os.WriteFile(tokenFile, []byte("m2m_example\n"), 0o600)

	c, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: srv.URL, TokenFile: tokenFile})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	id, _ := c.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 2})
	s, _ := c.GetSession(ctx, id) // instant mode: already active
	fmt.Println(s.State, s.Address, len(s.GPUs), vram.Format(s.GPUs[0].VRAMRequired))
	_ = c.CancelSession(ctx, id)
	fmt.Println(srv.Sim.Sessions()[0].State)
	// Output:
	// active test-agent-1.sim:43210 2 80GiB
	// closed
}
