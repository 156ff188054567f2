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

	"github.com/google/uuid"

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
	prev := []byte("juice-slurm previous vector key!")
	other := []byte("another key, not the cluster's!!")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "key.hex"), []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "key.hex"+session.PreviousSuffix), []byte(hex.EncodeToString(prev)+"\n"), 0o600); err != nil {
		return err
	}
	res := uuid.MustParse("7c2b9e4a-1d3f-4b6a-8e5c-0a1b2c3d4e5f")
	me := session.Binding{Cluster: "juicetest", JobID: 1234, Run: 0, Reservation: res}
	anyRes := session.Binding{Cluster: "juicetest", JobID: 1234, Run: 0} // what the compute node knows
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
	plain := func(e []session.EnvVar) []byte {
		var b strings.Builder
		for _, v := range e {
			b.WriteString(v.Name + "=" + v.Value + "\n")
		}
		return []byte(b.String())
	}
	seal := func(k []byte, id session.Binding, e []session.EnvVar) []byte {
		b, err := session.Seal(k, id, e)
		if err != nil {
			panic(err)
		}
		return b
	}
	// byHand seals any header: what session.Seal refuses to write (a version 1 file, a key id that is not the
	// sealing key's, a variable outside JUICE_), so that both openers are shown to refuse or accept it.
	byHand := func(k []byte, header string, pt []byte) []byte {
		block, _ := aes.NewCipher(k)
		aead, _ := cipher.NewGCM(block)
		nonce := []byte("fixed nonce!")
		out := append([]byte(header+"\n"), nonce...)
		return aead.Seal(out, nonce, pt, []byte(header))
	}
	hdr := func(id session.Binding, keyID string) string {
		return fmt.Sprintf("JUICE-SESSION v2 cluster=%s job=%d run=%d reservation=%s key=%s", id.Cluster, id.JobID, id.Run, id.Reservation, keyID)
	}
	v1 := "JUICE-SESSION v1 cluster=juicetest job=1234 run=0"
	good := seal(key, me, env)
	h := hdr(me, session.KeyID(key))
	run2 := session.Binding{Cluster: "juicetest", JobID: 1234, Run: 2, Reservation: res}
	otherJob := session.Binding{Cluster: "juicetest", JobID: 999, Run: 0, Reservation: res}
	otherRes := session.Binding{Cluster: "juicetest", JobID: 1234, Run: 0, Reservation: uuid.MustParse("0f0e0d0c-0b0a-4908-8706-050403020100")}
	tampered := append([]byte(nil), good...)
	tampered[len(tampered)-30] ^= 0x20
	forged := append([]byte(h+"\n"), seal(key, otherJob, env)[len(hdr(otherJob, session.KeyID(key)))+1:]...)
	forgedRes := append([]byte(h+"\n"), seal(key, otherRes, env)[len(hdr(otherRes, session.KeyID(key)))+1:]...)

	type vec struct {
		name string
		data []byte
		open session.Binding
		ok   bool
	}
	vecs := []vec{
		{"good", good, me, true},
		{"good-any-reservation", good, anyRes, true},
		{"good-run2", seal(key, run2, []session.EnvVar{env[0], env[6]}), run2, true},
		{"empty-env", seal(key, me, nil), me, true},
		{"previouskey", seal(prev, me, env), me, true},
		{"otherjob", seal(key, otherJob, env), me, false},
		{"otherrun", seal(key, run2, env), me, false},
		{"othercluster", seal(key, session.Binding{Cluster: "elsewhere", JobID: 1234, Reservation: res}, env), me, false},
		{"otherreservation", seal(key, otherRes, env), me, false},
		{"forgedheader", forged, me, false},
		{"forgedreservation", forgedRes, me, false},
		{"tampered", tampered, me, false},
		// Sealed under a key this cluster does not have: refused by its key id.
		{"unknownkey", seal(other, me, env), anyRes, false},
		// A key id no key has, over a tag the current key made: refused by the id, never tried with a known key.
		{"unknownkeyid", byHand(key, hdr(me, "0123456789abcdef"), plain(env)), anyRes, false},
		// The header names the current key; the previous key sealed it: the named key does not verify it.
		{"wrongkeyid", byHand(prev, h, plain(env)), anyRes, false},
		{"truncated", good[:len(h)+1+20], me, false},
		{"noheader", []byte(h), me, false},
		{"badversion", append([]byte("JUICE-SESSION v3"), good[len("JUICE-SESSION v2"):]...), me, false},
		{"badreservation", byHand(key, strings.Replace(h, res.String(), strings.ToUpper(res.String()), 1), plain(env)), anyRes, false},
		{"badname", byHand(key, h, []byte("JUICE_OK=1\nLD_PRELOAD=/tmp/evil.so\n")), me, false},
		{"empty", nil, me, false},
		// Version 1 (an older controller's, before an upgrade): opens under either key where the reservation is
		// not known, never where it is.
		{"v1", byHand(key, v1, plain(env)), anyRes, true},
		{"v1-previouskey", byHand(prev, v1, plain(env)), anyRes, true},
		{"v1-reservation-asked", byHand(key, v1, plain(env)), me, false},
		{"v1-unknownkey", byHand(other, v1, plain(env)), anyRes, false},
	}
	for _, v := range vecs {
		if err := os.WriteFile(filepath.Join(dir, v.name+".session"), v.data, 0o600); err != nil {
			return err
		}
		var exp strings.Builder
		fmt.Fprintf(&exp, "open cluster=%s job=%d run=%d", v.open.Cluster, v.open.JobID, v.open.Run)
		if v.open.Reservation != uuid.Nil {
			fmt.Fprintf(&exp, " reservation=%s", v.open.Reservation)
		}
		exp.WriteString("\n")
		got, err := session.Open(v.data, v.open, key, prev)
		if (err == nil) != v.ok {
			return fmt.Errorf("%s: the Go opener says %v, the vector wants ok=%v", v.name, err, v.ok)
		}
		if !v.ok {
			exp.WriteString("error\n")
		} else {
			exp.WriteString("ok\n")
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
