// Command stagger checks policy files and runs stagger's simulations. It
// builds from the core module alone (go install
// github.com/stagger-go/stagger/cmd/stagger@latest).
//
//	stagger check FILE     validate a policy file and explain it (FILE -: standard input)
//	stagger sim ...        run a simulation model
//	stagger lab ...        the storm lab: runs stagger-lab (package lab's command) from PATH
//
// check prints each error placed as compilers place theirs ("retry.json:3:17:
// invalid JSON: ..." for a syntax error, "retry.json: methodConfig[0]...: rule,
// got value" for a field) on stderr, and the file's warnings (also those of an
// invalid file) on stdout; a valid file with warnings says how many on its
// first line. With -proto FILE.proto (.proto sources, compiled here; imports
// under -proto-path DIR) or -descriptor-set FILE (a FileDescriptorSet, as
// `buf build -o FILE` writes it) it checks service and method names against
// those protos, a name they lack being an error, and reads their
// idempotency_level options; without them, it says that names were not
// checked (its own binary links none of the user's protos), flags only
// services named without a package, and -strict fails. Its worst-case
// figures are computed in bounded work and saturate ("more than 292 years")
// instead of overflowing; -max-attempts-cap is at most
// policy.MaxAttemptsCapLimit.
//
// Each subcommand lives in its own file and registers itself in commands
// from an init function, so adding one never touches this file.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand: run gets the arguments after the subcommand's
// name and returns the exit code (0 success, 1 failure, 2 usage).
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// stdin is what `stagger check -` reads; tests set it.
var stdin io.Reader = os.Stdin

// maxStdinBytes is a policy file's bound (policy.LoadFile's): a document
// on standard input past it is refused by policy.ParseConfig.
const maxStdinBytes = 4 << 20

// commands is the registry, filled by the subcommands' init functions.
var commands = map[string]command{}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stagger: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: stagger <command> [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands[name].summary)
	}
}
