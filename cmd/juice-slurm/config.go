package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// parseFlags parses args, then fills every flag not given on the command line from the environment
// (JUICE_<FLAG>) or, failing that, from the --config file.
func parseFlags(fs *flag.FlagSet, args []string) error {
	config := fs.String("config", os.Getenv("JUICE_CONFIG"), "a file of 'flag = value' lines (env JUICE_CONFIG)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	file := map[string]string{}
	if *config != "" {
		var err error
		if file, err = readConfig(*config, fs); err != nil {
			return err
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil || f.Name == "config" {
			return
		}
		env := "JUICE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v, ok := os.LookupEnv(env)
		from := "environment variable " + env
		if !ok {
			v, ok = file[f.Name]
			from = *config
		}
		if ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: invalid value %q for %s: %v", from, v, f.Name, e)
			}
		}
	})
	return err
}

func readConfig(path string, fs *flag.FlagSet) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)
		if !ok {
			return nil, fmt.Errorf("%s:%d: want 'flag = value', found %q", path, n, line)
		}
		if fs.Lookup(k) == nil {
			return nil, fmt.Errorf("%s:%d: unknown setting %q", path, n, k)
		}
		out[k] = v
	}
	return out, sc.Err()
}

// logFlags adds --log-format and --log-level to fs.
func logFlags(fs *flag.FlagSet) func() (logr.Logger, error) {
	format := fs.String("log-format", "json", "log format: json or console")
	level := fs.Int("log-level", 0, "log verbosity: 0 is info, 1 adds details, 2 adds every request")
	return func() (logr.Logger, error) {
		var cfg zap.Config
		switch *format {
		case "json":
			cfg = zap.NewProductionConfig()
		case "console":
			cfg = zap.NewDevelopmentConfig()
			cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		default:
			return logr.Logger{}, fmt.Errorf("--log-format %q: want json or console", *format)
		}
		cfg.Level = zap.NewAtomicLevelAt(zapcore.Level(-*level))
		cfg.Sampling = nil
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
		z, err := cfg.Build()
		if err != nil {
			return logr.Logger{}, err
		}
		return zapr.NewLogger(z), nil
	}
}
