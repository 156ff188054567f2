package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultConfig is the one configuration file of every command, read when it exists and neither --config nor
// JUICE_CONFIG names another.
const DefaultConfig = "/etc/juice-slurm/juice-slurm.conf"

// defaultConfig is DefaultConfig, except in tests.
var defaultConfig = DefaultConfig

// The commands that read settings, each with the registration of its flags. One file serves them all: a setting
// any of them knows may appear in it, and each command takes the settings it has and leaves the others.
var settingCommands = map[string]func(*flag.FlagSet){
	"controller": func(fs *flag.FlagSet) { controllerFlags(fs) },
	"hook":       func(fs *flag.FlagSet) { hookFlags(fs) },
	"status":     func(fs *flag.FlagSet) { statusFlags(fs) },
	"jobs":       func(fs *flag.FlagSet) { jobsFlags(fs) },
	"describe":   func(fs *flag.FlagSet) { jobFlags(fs) },
	"release":    func(fs *flag.FlagSet) { jobFlags(fs) },
	"version":    func(fs *flag.FlagSet) { versionFlags(fs) },
	"migrate":    func(fs *flag.FlagSet) { migrateFlags(fs) },
	"key":        func(fs *flag.FlagSet) { keyFlags(fs) },
	"report":     func(fs *flag.FlagSet) { reportFlags(fs) },
}

// commandLineOnly are flags about one invocation's output: neither the file nor the environment sets them, so a
// script that runs `status --json` gets JSON and one that runs `status` gets the table, whatever the host says.
var commandLineOnly = map[string]bool{"json": true, "all": true, "check": true, "config": true, "events": true, "from": true,
	"since": true, "until": true, "by": true, "format": true, "force": true}

// knownSettings is every name the configuration file may hold.
func knownSettings() map[string]bool {
	known := map[string]bool{}
	for name, register := range settingCommands {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		register(fs)
		fs.VisitAll(func(f *flag.Flag) { known[f.Name] = !commandLineOnly[f.Name] })
	}
	return known
}

// Origins says where each flag's value came from: "flag", "environment variable JUICE_X", "FILE:LINE" or "default".
type Origins map[string]string

// parseFlags parses args, then fills every flag not given on the command line from the environment
// (JUICE_<FLAG>) or, failing that, from the configuration file. The precedence, for every command: command line,
// then environment, then file, then the flag's default.
func parseFlags(fs *flag.FlagSet, args []string) error {
	_, err := parseFlagsFrom(fs, args)
	return err
}

func parseFlagsFrom(fs *flag.FlagSet, args []string) (Origins, error) {
	envConfig, named := os.LookupEnv("JUICE_CONFIG")
	if !named {
		envConfig = defaultConfig
	}
	config := fs.String("config", envConfig, "the configuration file, 'setting = value' lines (env JUICE_CONFIG; none: --config=)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	origins := Origins{}
	fs.Visit(func(f *flag.Flag) {
		origins[f.Name] = "flag"
		named = named || f.Name == "config"
	})
	file := map[string]setting{}
	if *config != "" {
		var err error
		file, err = readConfig(*config, fs)
		switch {
		case errors.Is(err, os.ErrNotExist) && !named:
			// The default file is optional: flags and the environment may say it all.
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
		if commandLineOnly[f.Name] {
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
			err = usageError{fmt.Errorf("%s: invalid value %q for %s: %v", from, v, f.Name, e)}
		}
		origins[f.Name] = from
	})
	if origins["config"] == "" {
		origins["config"] = "default"
	}
	return origins, err
}

type setting struct{ value, at string }

// readConfig reads 'setting = value' lines. A name no command knows is an error (a typo must not pass unseen); a
// name another command knows is left to that command.
func readConfig(path string, cmd *flag.FlagSet) (map[string]setting, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	known := knownSettings()
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
			return nil, usageError{fmt.Errorf("%s:%d: want 'setting = value', found %q", path, n, line)}
		}
		if !known[k] {
			return nil, usageError{fmt.Errorf("%s:%d: unknown setting %q", path, n, k)}
		}
		if cmd.Lookup(k) != nil {
			out[k] = setting{value: v, at: fmt.Sprintf("%s:%d", path, n)}
		}
	}
	return out, sc.Err()
}

// runSettings prints the settings a command would run with, and where each came from.
func runSettings(out io.Writer, args []string) error {
	cmd := "controller"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	register, ok := settingCommands[cmd]
	if !ok {
		names := make([]string, 0, len(settingCommands))
		for n := range settingCommands {
			names = append(names, n)
		}
		sort.Strings(names)
		return usageError{fmt.Errorf("settings: unknown command %q (one of %s)", cmd, strings.Join(names, ", "))}
	}
	fs := flag.NewFlagSet("juice-slurm settings "+cmd, flag.ContinueOnError)
	register(fs)
	origins, err := parseFlagsFrom(fs, args)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SETTING\tVALUE\tFROM")
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(w, "%s\t%s\t%s\n", f.Name, redact(f.Value.String()), origins[f.Name])
	})
	return w.Flush()
}

var passwords = []*regexp.Regexp{
	regexp.MustCompile(`(://[^:/@]*:)[^@]*(@)`),       // postgres://user:PASSWORD@host
	regexp.MustCompile(`(password=)('[^']*'|[^& ]*)`), // key=value and ?password=
}

// redact hides passwords in database URLs.
func redact(v string) string {
	for _, re := range passwords {
		v = re.ReplaceAllString(v, "${1}xxxxx${2}")
	}
	return v
}

// logFlags adds --log-format and --log-level to fs. The level is returned too, so SIGHUP can change it.
func logFlags(fs *flag.FlagSet) func() (logr.Logger, zap.AtomicLevel, error) {
	format := fs.String("log-format", "json", "log format: json or console")
	level := fs.String("log-level", "info", "log level: error, info, debug (details) or trace (every request); or 0, 1, 2")
	return func() (logr.Logger, zap.AtomicLevel, error) {
		var cfg zap.Config
		switch *format {
		case "json":
			cfg = zap.NewProductionConfig()
		case "console":
			cfg = zap.NewDevelopmentConfig()
			cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		default:
			return logr.Logger{}, zap.AtomicLevel{}, fmt.Errorf("--log-format %q: want json or console", *format)
		}
		l, err := parseLevel(*level)
		if err != nil {
			return logr.Logger{}, zap.AtomicLevel{}, err
		}
		cfg.Level = zap.NewAtomicLevelAt(l)
		cfg.Sampling = nil
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
		z, err := cfg.Build()
		if err != nil {
			return logr.Logger{}, zap.AtomicLevel{}, err
		}
		return zapr.NewLogger(z), cfg.Level, nil
	}
}

// parseLevel maps a level name (or a logr verbosity) to zap's level: logr's V(n) is zap's -n.
func parseLevel(s string) (zapcore.Level, error) {
	switch strings.ToLower(s) {
	case "error":
		return zapcore.ErrorLevel, nil
	case "info", "0":
		return zapcore.InfoLevel, nil
	case "debug", "1":
		return zapcore.DebugLevel, nil
	case "trace", "2":
		return zapcore.Level(-2), nil
	}
	return 0, fmt.Errorf("--log-level %q: want error, info, debug or trace", s)
}
