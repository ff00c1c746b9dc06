// Command stagger-lab is the live storm lab: real gRPC calls from many
// clients against an in-process server, stagger beside grpc-go's retry,
// go-grpc-middleware's, failsafe-go's and a client that does not retry
// (package lab says what each scenario does; `stagger-lab -h` lists them
// and the flags). From a clone, at the repository root:
//
//	go run ./lab/cmd/stagger-lab -scenario unavailable,refused
//
// It lives in the lab's module, which needs today's grpc-go and the peers
// it compares, so that the stagger command (check, sim) builds from the
// core module alone; `stagger lab ARGS` runs a stagger-lab found on PATH.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// command is the lab's entry, as lab.go registers it: run gets the
// arguments and returns the exit code (0 success, 1 failure, 2 usage).
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands holds the lab's one command, filled by lab.go's init function.
var commands = map[string]command{}

func main() {
	os.Exit(commands["lab"].run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks an error in the command line: the exit status is 2.
var errUsage = errors.New("usage")

// usageError wraps err so that the lab exits 2.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == errUsage }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// parseFlags parses args and rejects leftover arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		// The flag package already printed the error and the usage.
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// format is the -format flag: table (the default), csv or json.
type format string

func (f *format) String() string { return string(*f) }

func (f *format) Set(v string) error {
	switch v {
	case "table", "csv", "json":
		*f = format(v)
		return nil
	}
	return fmt.Errorf("must be table, csv or json, got %q", v)
}
