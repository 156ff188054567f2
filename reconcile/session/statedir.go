package session

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// StateDir is the shared state directory as the controller sees it: the prolog writes each run's session file
// there (FileName), the plugin reads it on the compute nodes, and the controller removes the files that no ready
// reservation owns any more, so that a file outlives its session only briefly (a leftover file is what a new job
// that reuses the job id would otherwise find).
//
// A file is judged by its header, which names its reservation (version 2): a file is removed only when it is
// still the one that was judged (same inode), so a file the prolog renames into place meanwhile, for a newer
// reservation of the same run, is never removed by mistake.
type StateDir struct{ Path string }

// A StateFile is one session file in the state directory, as its header says.
type StateFile struct {
	Name string
	// Header is what the file's header says; HeaderErr is set instead when it does not parse (a corrupt file, or
	// one no juice-slurm wrote), and such a file is stale for any run.
	Header    Header
	HeaderErr error
	ModTime   time.Time
	ino       uint64
}

// List reads every session file's header (the file names FileName makes; the prolog's temporary files and
// anything else are left alone).
func (d StateDir) List() ([]StateFile, error) {
	ents, err := os.ReadDir(d.Path)
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	var out []StateFile
	for _, e := range ents {
		if _, _, ok := ParseFileName(e.Name()); !ok {
			continue
		}
		f, err := d.stat(e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile (the epilog)
		}
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
	return out, nil
}

// stat reads name's header and identity. Anything but a regular file (a symlink, a FIFO) is not opened, and has
// a HeaderErr.
func (d StateDir) stat(name string) (StateFile, error) {
	p := filepath.Join(d.Path, name)
	fi, err := os.Lstat(p)
	if err != nil {
		return StateFile{}, err
	}
	sf := StateFile{Name: name, ModTime: fi.ModTime(), ino: inode(fi)}
	if !fi.Mode().IsRegular() {
		sf.HeaderErr = fmt.Errorf("%s is not a regular file", name)
		return sf, nil
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return StateFile{}, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return StateFile{}, err
	}
	sf.ModTime, sf.ino = fi.ModTime(), inode(fi)
	buf := make([]byte, 512)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return StateFile{}, fmt.Errorf("state directory: read %s: %w", name, err)
	}
	sf.Header, sf.HeaderErr = HeaderOf(buf[:n])
	return sf, nil
}

func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// Lookup reads the session file of run b, if there is one (ok false otherwise).
func (d StateDir) Lookup(b Binding) (f StateFile, ok bool, err error) {
	f, err = d.stat(FileName(b))
	if errors.Is(err, fs.ErrNotExist) {
		return StateFile{}, false, nil
	}
	if err != nil {
		return StateFile{}, false, fmt.Errorf("state directory: %w", err)
	}
	return f, true, nil
}

// Remove removes f if the directory still holds that very file (the same inode) under its name: it is moved
// aside first, which is atomic, and put back if it turns out to be another (a newer file renamed into place
// since f was read). It reports whether f was removed.
func (d StateDir) Remove(f StateFile) (bool, error) {
	p := filepath.Join(d.Path, f.Name)
	aside := filepath.Join(d.Path, "."+f.Name+".stale"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Rename(p, aside); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("state directory: remove %s: %w", f.Name, err)
	}
	fi, err := os.Lstat(aside)
	if err != nil {
		return false, fmt.Errorf("state directory: remove %s: %w", f.Name, err)
	}
	if inode(fi) != f.ino {
		// Another file took the name since f was read: put it back, unless a newer one is there already.
		if err := os.Link(aside, p); err != nil && !errors.Is(err, fs.ErrExist) {
			return false, fmt.Errorf("state directory: put %s back: %w", f.Name, err)
		}
		return false, os.Remove(aside)
	}
	if err := os.Remove(aside); err != nil {
		return false, fmt.Errorf("state directory: remove %s: %w", f.Name, err)
	}
	return true, nil
}

// RemoveFor removes run b's file if it is reservation b.Reservation's, or names no reservation (a version 1
// file, or one whose header does not parse): called when that reservation stops being ready. A file of another
// reservation of the run (a held job let go gets a new one) is left to that reservation.
func (d StateDir) RemoveFor(b Binding) (bool, error) {
	f, ok, err := d.Lookup(b)
	if err != nil || !ok {
		return false, err
	}
	if f.HeaderErr == nil && f.Header.Version == 2 && f.Header.Binding.Reservation != b.Reservation {
		return false, nil
	}
	return d.Remove(f)
}

// Reservation is the reservation a file names (uuid.Nil for a version 1 file or one whose header does not parse).
func (f StateFile) Reservation() uuid.UUID {
	if f.HeaderErr != nil || f.Header.Version != 2 {
		return uuid.Nil
	}
	return f.Header.Binding.Reservation
}
