package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/internal/settings"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

// keyOpts are the key commands' settings: the cluster key file (the controller's setting), for rotate the file
// that holds the new key, and for retire the database, to see whether a ready reservation still holds a session
// sealed under the key it would drop.
type keyOpts struct {
	keyFile, from, dbURL, cluster *string
	force, json                   *bool
}

func keyFlags(fs *flag.FlagSet) *keyOpts {
	return &keyOpts{
		keyFile: fs.String("cluster-key", "/etc/juice-slurm/cluster.key", "the cluster key that seals session files (64 hex characters, mode 0600); the previous key is this file + "+session.PreviousSuffix),
		from:    fs.String("from", "", "rotate: the new key's file (64 hex characters, mode 0600), e.g. one already installed on the compute nodes (default: a new random key)"),
		dbURL:   fs.String("database-url", "", "retire: the database, to refuse while a ready reservation holds a session sealed under the previous key (empty: not checked; compute nodes)"),
		cluster: fs.String("cluster", "", "retire: Slurm's ClusterName (with database-url)"),
		force:   fs.Bool("force", false, "retire even though ready reservations hold sessions sealed under the previous key (their jobs' next steps fail)"),
		json:    fs.Bool("json", false, "show: print JSON instead of text"),
	}
}

const keyUsage = "usage: juice-slurm key show|rotate|retire [flags]"

// runKey rotates the cluster key. The key seals session files, and a file names the key id it was sealed under
// (session.KeyID): the controller seals with cluster.key only, and the plugin opens files sealed under
// cluster.key or cluster.key.previous. So:
//
//	show    prints the key ids of the current and the previous key;
//	rotate  makes the current key the previous one and puts a new key (--from FILE, or a random one) in its
//	        place, atomically: the controller seals with the new key from its next seal on;
//	retire  removes the previous key: files sealed under it no longer open.
//
// On the controller host the files are SlurmUser's; on a compute node root's. A new file takes the owner and
// group of the key it replaces.
func runKey(ctx context.Context, out io.Writer, args []string) error {
	if len(args) == 0 {
		return usageError{errors.New(keyUsage)}
	}
	sub := args[0]
	if isHelp(sub) {
		// `key --help`: the usage and the flags every key command takes.
		fs := flag.NewFlagSet("juice-slurm key", flag.ContinueOnError)
		keyFlags(fs)
		fs.String("config", settings.DefaultFile, "the configuration file")
		fmt.Fprintln(fs.Output(), keyUsage)
		fs.PrintDefaults()
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("juice-slurm key "+sub, flag.ContinueOnError)
	o := keyFlags(fs)
	keyFile, from := o.keyFile, o.from
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("key %s: unexpected argument %q", sub, fs.Arg(0))}
	}
	if *o.force && sub != "retire" {
		return usageError{fmt.Errorf("key %s: --force is for retire only", sub)}
	}
	if *from != "" && sub != "rotate" {
		return usageError{fmt.Errorf("key %s: --from is for rotate only", sub)}
	}
	if *o.json && sub != "show" {
		return usageError{fmt.Errorf("key %s: --json is for show only", sub)}
	}
	k := session.KeyFile(*keyFile)
	prevPath := *keyFile + session.PreviousSuffix
	switch sub {
	case "show":
		cur, err := k.Bytes()
		if err != nil {
			return err
		}
		prev, err := k.Previous()
		if err != nil {
			return err
		}
		if *o.json {
			type keyOut struct {
				ID   string `json:"id"`
				File string `json:"file"`
			}
			v := struct {
				Current  keyOut  `json:"current"`
				Previous *keyOut `json:"previous"`
			}{Current: keyOut{session.KeyID(cur), *keyFile}}
			if prev != nil {
				v.Previous = &keyOut{session.KeyID(prev), prevPath}
			}
			return writeJSON(out, v)
		}
		fmt.Fprintf(out, "current   %s  %s\n", session.KeyID(cur), *keyFile)
		if prev != nil {
			fmt.Fprintf(out, "previous  %s  %s\n", session.KeyID(prev), prevPath)
		} else {
			fmt.Fprintf(out, "previous  none\n")
		}
		return nil
	case "rotate":
		return rotateKey(out, k, *keyFile, *from)
	case "retire":
		prev, err := k.Previous()
		if err != nil {
			return err
		}
		if prev == nil {
			return notFoundError{fmt.Errorf("key retire: there is no previous key (%s)", prevPath)}
		}
		if err := checkRetire(ctx, out, o, session.KeyID(prev)); err != nil {
			return err
		}
		if err := os.Remove(prevPath); err != nil {
			return fmt.Errorf("key retire: %w", err)
		}
		if err := syncDir(filepath.Dir(prevPath)); err != nil {
			return fmt.Errorf("key retire: %w", err)
		}
		fmt.Fprintf(out, "retired the previous key %s: session files sealed under it no longer open\n", session.KeyID(prev))
		return nil
	default:
		return usageError{fmt.Errorf("key: unknown command %q (%s)", sub, keyUsage)}
	}
}

// checkRetire refuses to retire the previous key while a ready reservation holds a session sealed under it (or a
// version 1 session, which names no key): its job, running or about to, opens that file at every step. Without a
// database (a compute node) it cannot tell, and says so.
func checkRetire(ctx context.Context, out io.Writer, o *keyOpts, prevID string) error {
	if *o.force {
		return nil
	}
	if *o.dbURL == "" || *o.cluster == "" {
		fmt.Fprintf(out, "no database-url and cluster: not checked whether a ready reservation still holds a session sealed under %s (retire on the controller host first)\n", prevID)
		return nil
	}
	pool, err := pgxpool.New(ctx, *o.dbURL)
	if err != nil {
		return fmt.Errorf("key retire: database: %w", err)
	}
	defer pool.Close()
	st := store.New(pool, *o.cluster)
	open, err := st.Open(ctx)
	if err != nil {
		return fmt.Errorf("key retire: %w (--force retires without the check)", err)
	}
	var held []string
	for _, r := range open {
		if r.Status.State != reconcile.StateReady {
			continue
		}
		sealed, err := st.Sealed(ctx, r.ID)
		if err != nil {
			return fmt.Errorf("key retire: %w", err)
		}
		h, err := session.HeaderOf(sealed)
		if err != nil || h.Version == 1 || h.KeyID == prevID {
			held = append(held, fmt.Sprintf("%d.%d", r.Run.JobID, r.Run.Run))
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("key retire: %d ready reservation(s) hold sessions sealed under the previous key %s (job.run %s): their jobs open them at every step; retire once they have ended, or --force",
			len(held), prevID, strings.Join(held, ", "))
	}
	return nil
}

// rotateKey: cluster.key becomes cluster.key.previous and the new key cluster.key. Both steps are atomic (a
// hard link that fails if the previous key exists, then a rename over the current key), and at every moment
// between them both files hold a key that opens every file sealed so far.
func rotateKey(out io.Writer, k *session.Key, path, from string) error {
	cur, err := k.Bytes()
	if err != nil {
		return err
	}
	prevPath := path + session.PreviousSuffix
	if prev, err := k.Previous(); err != nil {
		return err
	} else if prev != nil {
		// Rotating again would drop it, and with it every file still sealed under it.
		return fmt.Errorf("key rotate: a previous key is still installed (%s, key %s): retire it first (juice-slurm key retire), once no job that got its session before the last rotation is left",
			prevPath, session.KeyID(prev))
	}
	var next []byte
	if from != "" {
		v, err := secretfile.Load(from, session.CheckKey)
		if err != nil {
			return fmt.Errorf("key rotate: --from: %w", err)
		}
		next, _ = hex.DecodeString(v)
	} else {
		next = make([]byte, 32)
		if _, err := rand.Read(next); err != nil {
			return fmt.Errorf("key rotate: %w", err)
		}
	}
	if session.KeyID(next) == session.KeyID(cur) {
		return fmt.Errorf("key rotate: the new key is the current key (%s)", session.KeyID(cur))
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("key rotate: %w", err)
	}
	tmp, err := writeKeyTemp(path, next, fi)
	if err != nil {
		return fmt.Errorf("key rotate: %w", err)
	}
	defer os.Remove(tmp)
	if err := os.Link(path, prevPath); err != nil {
		return fmt.Errorf("key rotate: keep the current key as the previous one: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		// The current key is still in place, and also the previous one: retire undoes it.
		return fmt.Errorf("key rotate: install the new key: %w (the current key is unchanged)", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("key rotate: %w", err)
	}
	fmt.Fprintf(out, "rotated the cluster key: current %s, previous %s\n", session.KeyID(next), session.KeyID(cur))
	return nil
}

// writeKeyTemp writes key in hex into a new file beside path, mode 0600, with the owner and group of like (when
// this process may set them), synced to disk.
func writeKeyTemp(path string, key []byte, like fs.FileInfo) (string, error) {
	uid, gid := -1, -1
	if st, ok := like.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	return secretfile.WriteTemp(filepath.Dir(path), filepath.Base(path), []byte(hex.EncodeToString(key)+"\n"), uid, gid)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
