// Command gen writes the session-file test vectors in test/vectors/session/: a cluster key and, for each case, a
// file and what opening it must give. Both the Go opener and the C plugin's opener are tested against them.
// Sealing draws a random nonce, so each run writes new files; the committed ones are the reference.
//
//	go run ./test/vectors/gen test/vectors/session
package main

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	key := []byte("juice-slurm test vector key 32B!")
	other := []byte("another key, not the cluster's!!")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "key.hex"), []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return err
	}
	me := session.Binding{Cluster: "juicetest", JobID: 1234, Run: 0}
	env := []session.EnvVar{
		{Name: "JUICE_SESSION_ID", Value: "5b0f6a52-8d51-4c1e-9a57-2b8e4c9f7d10"},
		{Name: "JUICE_AGENT_ADDRESS", Value: "10.0.0.7:43210"},
		{Name: "JUICE_POOL", Value: "test"},
		{Name: "JUICE_GPU_COUNT", Value: "2"},
		{Name: "JUICE_GPUS", Value: "0,1"},
		{Name: "JUICE_VRAM", Value: "0"},
		{Name: "JUICE_REQUEST", Value: "juice:v1:pool=test,gpus=2"},
		{Name: "JUICE_CFG_OVERRIDE", Value: `{"id":"5b0f6a52-8d51-4c1e-9a57-2b8e4c9f7d10","servers":["10.0.0.7:43210"],"requirements":{"poolId":"test","gpus":[{"vramRequired":0},{"vramRequired":0}]}}`},
		{Name: "JUICE_EMPTY", Value: ""},
	}
	seal := func(k []byte, id session.Binding, e []session.EnvVar) []byte {
		b, err := session.Seal(k, id, e)
		if err != nil {
			panic(err)
		}
		return b
	}
	good := seal(key, me, env)
	run2 := session.Binding{Cluster: "juicetest", JobID: 1234, Run: 2}
	otherJob := session.Binding{Cluster: "juicetest", JobID: 999, Run: 0}
	tampered := append([]byte(nil), good...)
	tampered[len(tampered)-30] ^= 0x20
	forged := append([]byte("JUICE-SESSION v1 cluster=juicetest job=1234 run=0\n"), seal(key, otherJob, env)[len("JUICE-SESSION v1 cluster=juicetest job=999 run=0\n"):]...)
	// A file sealed with the right key whose plaintext names a variable outside JUICE_: session.Seal refuses to
	// write one, so it is sealed by hand here; both openers must refuse it.
	header := "JUICE-SESSION v1 cluster=juicetest job=1234 run=0"
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	nonce := []byte("fixed nonce!")
	badName := append([]byte(header+"\n"), nonce...)
	badName = aead.Seal(badName, nonce, []byte("JUICE_OK=1\nLD_PRELOAD=/tmp/evil.so\n"), []byte(header))

	type vec struct {
		name string
		data []byte
		open session.Binding
		ok   bool
	}
	vecs := []vec{
		{"good", good, me, true},
		{"good-run2", seal(key, run2, []session.EnvVar{env[0], env[6]}), run2, true},
		{"empty-env", seal(key, me, nil), me, true},
		{"otherjob", seal(key, otherJob, env), me, false},
		{"otherrun", seal(key, run2, env), me, false},
		{"othercluster", seal(key, session.Binding{Cluster: "elsewhere", JobID: 1234}, env), me, false},
		{"forgedheader", forged, me, false},
		{"tampered", tampered, me, false},
		{"wrongkey", seal(other, me, env), me, false},
		{"truncated", good[:len(header)+1+20], me, false},
		{"noheader", []byte("JUICE-SESSION v1 cluster=juicetest job=1234 run=0"), me, false},
		{"badversion", append([]byte("JUICE-SESSION v2"), good[len("JUICE-SESSION v1"):]...), me, false},
		{"badname", badName, me, false},
		{"empty", nil, me, false},
	}
	for _, v := range vecs {
		if err := os.WriteFile(filepath.Join(dir, v.name+".session"), v.data, 0o600); err != nil {
			return err
		}
		var exp strings.Builder
		fmt.Fprintf(&exp, "open cluster=%s job=%d run=%d\n", v.open.Cluster, v.open.JobID, v.open.Run)
		if !v.ok {
			exp.WriteString("error\n")
		} else {
			exp.WriteString("ok\n")
			got, err := session.Open(key, v.data, v.open)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			for _, e := range got {
				exp.WriteString(e.Name + "=" + e.Value + "\n")
			}
		}
		if err := os.WriteFile(filepath.Join(dir, v.name+".expect"), []byte(exp.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
