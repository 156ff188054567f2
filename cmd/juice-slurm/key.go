package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// keyFlags are the key commands' settings: the cluster key file, the controller's (the setting is shared), and
// for rotate the file that holds the new key.
func keyFlags(fs *flag.FlagSet) (keyFile, from *string) {
	return fs.String("cluster-key", "/etc/juice-slurm/cluster.key", "the cluster key that seals session files (64 hex characters, mode 0600); the previous key is this file + "+session.PreviousSuffix),
		fs.String("from", "", "rotate: the new key's file (64 hex characters, mode 0600), e.g. one already installed on the compute nodes (default: a new random key)")
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
func runKey(out io.Writer, args []string) error {
	if len(args) == 0 {
		return usageError{errors.New(keyUsage)}
	}
	sub := args[0]
	fs := flag.NewFlagSet("juice-slurm key "+sub, flag.ContinueOnError)
	keyFile, from := keyFlags(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("key %s: unexpected argument %q", sub, fs.Arg(0))}
	}
	if *from != "" && sub != "rotate" {
		return usageError{fmt.Errorf("key %s: --from is for rotate only", sub)}
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
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	fail := func(err error) (string, error) {
		f.Close()
		os.Remove(name)
		return "", err
	}
	if err := f.Chmod(0o600); err != nil {
		return fail(err)
	}
	if st, ok := like.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
		if err := f.Chown(int(st.Uid), int(st.Gid)); err != nil {
			return fail(err)
		}
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
