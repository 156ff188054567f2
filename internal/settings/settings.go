// Package settings reads juice-slurm's settings: a command's flags, filled from the command line, then the
// environment (JUICE_<FLAG>), then the one configuration file every command shares, then the flag's default.
//
// It is apart from cmd/juice-slurm so that cmd/juice-slurm-hook, which slurmctld runs for every job, reads the
// same file the same way without linking the commands whose flags it lists (Names): the hook's start-up time is
// the prolog's floor.
package settings

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// DefaultFile is the one configuration file of every command, read when it exists and neither --config nor
// JUICE_CONFIG names another.
const DefaultFile = "/etc/juice-slurm/juice-slurm.conf"

// UsageError is a bad flag, setting or argument: the commands exit with status 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Origins says where each flag's value came from: "flag", "environment variable JUICE_X", "FILE:LINE" or "default".
type Origins map[string]string

// Parser parses one command's flags.
type Parser struct {
	// File is read when it exists and neither --config nor JUICE_CONFIG names another (which must exist).
	File string
	// Known reports whether the file may hold a setting: one that some command takes. One file serves every
	// command, so a setting another command knows is left to it; one no command knows is a typo, refused.
	Known func(name string) bool
	// CommandLineOnly are flags about one invocation's output: neither the file nor the environment sets them.
	CommandLineOnly map[string]bool
	// PassUnreadable passes over a default File that the caller may not read (the file is root:slurm 0640, as
	// it may hold a database password): for the commands an ordinary user runs, whose settings are no secret
	// and come from the environment or the defaults then. Origins["config"] says the file was passed over. A
	// file named by --config or JUICE_CONFIG must still be readable.
	PassUnreadable bool
}

// Unreadable is how Origins["config"] ends when the default file was passed over (Parser.PassUnreadable).
const Unreadable = " (not readable by you: passed over)"

// Parse parses args, then fills every flag not given on the command line from the environment (JUICE_<FLAG>)
// or, failing that, from the configuration file. It adds --config to fs.
func (p Parser) Parse(fs *flag.FlagSet, args []string) (Origins, error) {
	envConfig, named := os.LookupEnv("JUICE_CONFIG")
	if !named {
		envConfig = p.File
	}
	config := fs.String("config", envConfig, "the configuration file, 'setting = value' lines (env JUICE_CONFIG; none: --config=)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, UsageError{err}
	}
	if fs.NArg() > 0 {
		return nil, UsageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	origins := Origins{}
	fs.Visit(func(f *flag.Flag) {
		origins[f.Name] = "flag"
		named = named || f.Name == "config"
	})
	file := map[string]setting{}
	if *config != "" {
		var err error
		file, err = p.read(*config, fs)
		switch {
		case errors.Is(err, os.ErrNotExist) && !named:
			// The default file is optional: flags and the environment may say it all.
		case errors.Is(err, os.ErrPermission) && !named && p.PassUnreadable:
			origins["config"] = "default" + Unreadable
		case err != nil:
			return nil, err
		}
		if _, ok := origins["config"]; !ok && named {
			origins["config"] = "environment variable JUICE_CONFIG"
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if origins[f.Name] != "" || err != nil || f.Name == "config" {
			return
		}
		if p.CommandLineOnly[f.Name] {
			origins[f.Name] = "default"
			return
		}
		env := "JUICE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v, ok := os.LookupEnv(env)
		from := "environment variable " + env
		if !ok {
			var s setting
			s, ok = file[f.Name]
			v, from = s.value, s.at
		}
		if !ok {
			origins[f.Name] = "default"
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = UsageError{fmt.Errorf("%s: invalid value %q for %s: %v", from, v, f.Name, e)}
		}
		origins[f.Name] = from
	})
	if origins["config"] == "" {
		origins["config"] = "default"
	}
	return origins, err
}

type setting struct{ value, at string }

// read reads 'setting = value' lines. A name no command knows is an error (a typo must not pass unseen); a name
// another command knows is left to that command.
func (p Parser) read(path string, cmd *flag.FlagSet) (map[string]setting, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	out := map[string]setting{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)
		if !ok {
			return nil, UsageError{fmt.Errorf("%s:%d: want 'setting = value', found %q", path, n, line)}
		}
		if p.Known == nil || !p.Known(k) {
			return nil, UsageError{fmt.Errorf("%s:%d: unknown setting %q", path, n, k)}
		}
		if cmd.Lookup(k) != nil {
			out[k] = setting{value: v, at: fmt.Sprintf("%s:%d", path, n)}
		}
	}
	return out, sc.Err()
}
