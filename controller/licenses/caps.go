package licenses

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Caps puts the policy's per-user caps where Slurm enforces them: a pool's max_gpus_per_user becomes
// MaxTRESPerUser=license/juice_<pool>@juice=<cap> on each QOS named, so that a user's job over the cap stays
// PENDING with Slurm's own reason (QOSMaxLicensePerUser) instead of starting and waiting in its prolog. The
// controller's own check (policy.WaitForUser) stays as the second line, for jobs of other QOS and for the GPUs a
// user's pending jobs hold reserved ahead, which Slurm does not count.
//
// Slurm enforces a QOS's limits only with AccountingStorageEnforce=limits (every user then needs an association)
// and on the TRES of AccountingStorageTRES: a pool missing there is an error naming it.
type Caps struct {
	// QOS are the QOS to keep the caps on: those Juice jobs run in (usually the default, normal).
	QOS []string
	// PerUser is max_gpus_per_user by pool, in lower case; a pool without a cap is absent.
	PerUser map[string]int
}

// qosName is what a QOS name given to sacctmgr may hold: nothing that would end the word or start another
// (=, commas, spaces, quotes).
var qosName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// ParseQOS reads a comma-separated list of QOS names (the caps-qos setting); "" is none.
func ParseQOS(list string) ([]string, error) {
	var out []string
	for _, q := range strings.Split(list, ",") {
		q = strings.TrimSpace(q)
		if q == "" {
			continue
		}
		if !qosName.MatchString(q) {
			return nil, fmt.Errorf("QOS name %q: only letters, digits, '_', '.' and '-'", q)
		}
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out, nil
}

// Of returns pool's cap (0: none).
func (c Caps) Of(pool string) int { return c.PerUser[strings.ToLower(pool)] }

// qosCaps is a QOS's MaxTRESPerUser on the Juice licenses, as slurmdbd has it: by license (juice_<pool>@juice), in
// lower case.
type qosCaps map[string]int

// capWrites is what must be set on a QOS holding have for the pools to carry their caps: a
// "license/juice_<pool>@juice=N" for each cap to set or change, "=-1" for each one a pool no longer has; sorted,
// so one call writes them all and an unchanged QOS costs nothing.
func capWrites(have qosCaps, pools []string, caps Caps) []string {
	var out []string
	seen := map[string]bool{}
	for _, pool := range pools {
		lic := strings.ToLower(Name(pool) + "@" + Server)
		if seen[lic] {
			continue
		}
		seen[lic] = true
		cur, set := have[lic]
		switch want := caps.Of(pool); {
		case want > 0 && (!set || cur != want):
			out = append(out, fmt.Sprintf("license/%s@%s=%d", Name(pool), Server, want))
		case want <= 0 && set:
			out = append(out, fmt.Sprintf("license/%s@%s=-1", Name(pool), Server))
		}
	}
	slices.Sort(out)
	return out
}

// parseQOSCaps reads the Juice licenses' entries of a MaxTRESPerUser as sacctmgr shows it
// ("cpu=4,license/juice_lab@juice=1"); other TRES are the site's and left alone.
func parseQOSCaps(tres string) (qosCaps, error) {
	out := qosCaps{}
	for _, e := range strings.Split(tres, ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(e), "=")
		lic, isLicense := strings.CutPrefix(strings.ToLower(name), "license/")
		if !ok || !isLicense || !strings.HasPrefix(lic, namePrefix) || !strings.HasSuffix(lic, "@"+Server) {
			continue
		}
		v, err := strconv.Atoi(n)
		if err != nil {
			return nil, fmt.Errorf("MaxTRESPerUser entry %q: not a count", e)
		}
		out[lic] = v
	}
	return out, nil
}

// readQOS returns what QOS q holds of the Juice licenses' caps; a QOS slurmdbd does not have is an error.
func readQOS(ctx context.Context, m Sacctmgr, q string) (qosCaps, error) {
	out, err := m.Run(ctx, "-n", "-P", "show", "qos", "where", "name="+q, "format=name,maxtrespu")
	if err != nil {
		return nil, fmt.Errorf("read the caps of QOS %s: %w", q, err)
	}
	for _, line := range strings.Split(out, "\n") {
		name, tres, ok := strings.Cut(strings.TrimSpace(line), "|")
		if ok && strings.EqualFold(name, q) {
			caps, err := parseQOSCaps(tres)
			if err != nil {
				return nil, fmt.Errorf("read the caps of QOS %s: %w", q, err)
			}
			return caps, nil
		}
	}
	return nil, fmt.Errorf("read the caps of QOS %s: slurmdbd has no such QOS (sacctmgr show qos)", q)
}

// syncCaps brings every QOS of s.Caps to the caps of pools. Each QOS is read at every sync (one sacctmgr call: a
// cap an administrator changed by hand is put back within a period) and written only when a cap differs, all of
// its caps in one call.
func (s *Syncer) syncCaps(ctx context.Context, pools []string) error {
	var errs []error
	for _, q := range s.Caps.QOS {
		have, err := readQOS(ctx, s.Sacctmgr, q)
		if err != nil {
			s.observe("error")
			errs = append(errs, err)
			continue
		}
		set := capWrites(have, pools, s.Caps)
		if len(set) == 0 {
			continue
		}
		args := []string{"-i", "modify", "qos", "where", "name=" + q, "set", "MaxTRESPerUser=" + strings.Join(set, ",")}
		if _, err := s.Sacctmgr.Run(ctx, args...); err != nil {
			s.observe("error")
			err = fmt.Errorf("caps on QOS %s: %w", q, err)
			if strings.Contains(err.Error(), "no TRES known") {
				err = fmt.Errorf("%w (each pool's license/juice_<pool>@juice must be in slurm.conf's AccountingStorageTRES)", err)
			}
			errs = append(errs, err)
			continue
		}
		s.observe("ok")
		s.Log.Info("per-user caps set", "qos", q, "maxTRESPerUser", strings.Join(set, ","))
	}
	return errors.Join(errs...)
}
