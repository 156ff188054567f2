// Command juice-legacy-db manages the legacy controller's database on the test bed's PostgreSQL server for
// test/juicelegacy/legacy.sh. The server's admin URL comes from $JUICE_LEGACY_PG_URL (never from the command
// line, where a password would show in ps), and nothing prints it unredacted.
//
//	juice-legacy-db create  -db juice_legacy_NAME -conn-file FILE   create the database (kept when it exists) with
//	                                                                 the "uuid-ossp" extension; write its URL to FILE (0600)
//	juice-legacy-db drop    -db juice_legacy_NAME                    drop it (WITH (FORCE))
//	juice-legacy-db pool-id -db juice_legacy_NAME -name POOL         print the id of the oldest pool of that name, if any
//	juice-legacy-db ping                                             check the server answers
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/juice-slurm/juice-slurm/test/juicelegacy/issuer"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: juice-legacy-db create|drop|pool-id|ping [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	db := fs.String("db", "", "database name (must start with juice_legacy_)")
	connFile := fs.String("conn-file", "", "create: file to write the database URL to (mode 0600)")
	name := fs.String("name", "", "pool-id: the pool's name")
	_ = fs.Parse(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Args[1], *db, *connFile, *name); err != nil {
		fmt.Fprintln(os.Stderr, "juice-legacy-db:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd, db, connFile, pool string) error {
	admin := os.Getenv("JUICE_LEGACY_PG_URL")
	if admin == "" {
		return errors.New("JUICE_LEGACY_PG_URL is not set")
	}
	if cmd != "ping" && !strings.HasPrefix(db, "juice_legacy_") {
		return fmt.Errorf("-db %q: the legacy test bed's databases are named juice_legacy_*", db)
	}
	dbURL, err := withDatabase(admin, db)
	if err != nil {
		return err
	}
	switch cmd {
	case "ping":
		c, err := connect(ctx, admin)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	case "create":
		c, err := connect(ctx, admin)
		if err != nil {
			return err
		}
		var exists bool
		if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
			c.Close(ctx)
			return err
		}
		if !exists {
			if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
				c.Close(ctx)
				return fmt.Errorf("create database %s: %w", db, err)
			}
		}
		c.Close(ctx)
		d, err := connect(ctx, dbURL)
		if err != nil {
			return err
		}
		defer d.Close(ctx)
		// The legacy models default their UUID keys to uuid_generate_v4().
		if _, err := d.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS "uuid-ossp"`); err != nil {
			return fmt.Errorf("create extension uuid-ossp in %s: %w", db, err)
		}
		if connFile != "" {
			if err := issuer.WriteFileAtomic(connFile, []byte(dbURL+"\n"), 0o600); err != nil {
				return err
			}
		}
		if exists {
			fmt.Println("exists")
		} else {
			fmt.Println("created")
		}
		return nil
	case "drop":
		c, err := connect(ctx, admin)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
		return err
	case "pool-id":
		d, err := connect(ctx, dbURL)
		if err != nil {
			return err
		}
		defer d.Close(ctx)
		var id string
		err = d.QueryRow(ctx, `SELECT id::text FROM pools WHERE pool_name = $1 AND deleted_at IS NULL
			ORDER BY created_at, id LIMIT 1`, pool).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err) {
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Println(id)
		return nil
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func isUndefinedTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "SQLSTATE 42P01")
}

func connect(ctx context.Context, raw string) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(raw), err)
	}
	return c, nil
}

// withDatabase is the admin URL with another database name.
func withDatabase(raw, db string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("JUICE_LEGACY_PG_URL: not a URL")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", errors.New("JUICE_LEGACY_PG_URL: want postgres://USER[:PASSWORD]@HOST:PORT/DB?sslmode=disable")
	}
	u.Path = "/" + db
	u.RawPath = ""
	return u.String(), nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
