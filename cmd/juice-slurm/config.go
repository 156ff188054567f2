package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/juice-slurm/juice-slurm/internal/hook"
	"github.com/juice-slurm/juice-slurm/internal/settings"
)

// DefaultConfig is the one configuration file of every command, read when it exists and neither --config nor
// JUICE_CONFIG names another.
const DefaultConfig = settings.DefaultFile

// defaultConfig is DefaultConfig, except in tests.
var defaultConfig = DefaultConfig

// The commands that read settings, each with the registration of its flags. One file serves them all: a setting
// any of them knows may appear in it, and each command takes the settings it has and leaves the others.
var settingCommands = map[string]func(*flag.FlagSet){
	"controller": func(fs *flag.FlagSet) { controllerFlags(fs) },
	"hook":       func(fs *flag.FlagSet) { hook.Flags(fs) },
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
	"since": true, "until": true, "by": true, "format": true, "force": true,
	"u": true, "user": true, "p": true, "partition": true, "t": true, "states": true, "noheader": true}

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

// onOff is a switch that reads on or off (true or false too, as other switches do): the licenses setting, which
// is JUICE_LICENSES=on|off in juice-config.sh and JUICE_LICENSES in the controller's environment alike.
type onOff bool

func switchFlag(fs *flag.FlagSet, name string, usage string) *bool {
	var b bool
	fs.Var((*onOff)(&b), name, usage)
	return &b
}

func (b *onOff) String() string {
	if b != nil && bool(*b) {
		return "on"
	}
	return "off"
}

func (b *onOff) Set(s string) error {
	switch strings.ToLower(s) {
	case "on", "true":
		*b = true
	case "off", "false":
		*b = false
	default:
		return fmt.Errorf("%q: want on or off", s)
	}
	return nil
}

// IsBoolFlag lets --licenses stand for --licenses=on.
func (b *onOff) IsBoolFlag() bool { return true }

// Origins says where each flag's value came from.
type Origins = settings.Origins

// parseFlags parses args, then fills every flag not given on the command line from the environment
// (JUICE_<FLAG>) or, failing that, from the configuration file. The precedence, for every command: command line,
// then environment, then file, then the flag's default.
func parseFlags(fs *flag.FlagSet, args []string) error {
	_, err := parseFlagsFrom(fs, args)
	return err
}

func parseFlagsFrom(fs *flag.FlagSet, args []string) (Origins, error) {
	return settingsParser(defaultConfig).Parse(fs, args)
}

// userCommands are the commands an ordinary user runs, which parse their flags with parseUserFlags.
var userCommands = map[string]bool{"jobs": true, "version": true}

// parseUserFlags is parseFlags for the commands an ordinary user runs (jobs, version): the settings file is
// root:slurm 0640, and one the caller may not read is passed over (the environment and the defaults say the
// rest) instead of failing the command.
func parseUserFlags(fs *flag.FlagSet, args []string) (Origins, error) {
	p := settingsParser(defaultConfig)
	p.PassUnreadable = true
	return p.Parse(fs, args)
}

// configOf names the settings file a parsed command read (or looked for), for messages: the one --config or
// JUICE_CONFIG named, else the default.
func configOf(fs *flag.FlagSet) string {
	if f := fs.Lookup("config"); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	return "none (--config=)"
}

// settingsParser reads the settings of every command but the hook (internal/hook reads its own the same way):
// the file may hold any name of settings.Names, which TestSettingNamesAreTheCommandsFlags keeps equal to
// knownSettings.
func settingsParser(file string) settings.Parser {
	return settings.Parser{File: file, Known: func(name string) bool { return settings.Names[name] },
		CommandLineOnly: commandLineOnly}
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
	parse := parseFlagsFrom
	if userCommands[cmd] {
		parse = parseUserFlags // what a user's `jobs` runs with, from what the user may read
	}
	origins, err := parse(fs, args)
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
			return logr.Logger{}, zap.AtomicLevel{}, usageError{fmt.Errorf("--log-format %q: want json or console", *format)}
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
	return 0, usageError{fmt.Errorf("--log-level %q: want error, info, debug or trace", s)}
}
