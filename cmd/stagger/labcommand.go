package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
)

// The storm lab links today's grpc-go and the retry layers it compares, so
// it is its own command in the lab's module (stagger-lab), and this one
// builds from the core module alone. `stagger lab ARGS` runs stagger-lab
// ARGS when it is on PATH, as git runs git-NAME.
func init() {
	commands["lab"] = command{
		summary: "live storm lab (runs stagger-lab from PATH; from a clone: go run ./lab/cmd/stagger-lab)",
		run:     runStaggerLab,
	}
}

// labMissing says where the lab is when stagger-lab is not on PATH.
const labMissing = `stagger lab: stagger-lab is not on PATH. The storm lab is a command of the lab's
module, which is not published: from a clone of the repository, at its root,
    go run ./lab/cmd/stagger-lab [flags]
or install it from there with
    go install ./lab/cmd/stagger-lab
`

// runStaggerLab runs stagger-lab from PATH with args and this process's
// input, and returns its exit code.
func runStaggerLab(args []string, stdout, stderr io.Writer) int {
	path, err := exec.LookPath("stagger-lab")
	if err != nil {
		fmt.Fprint(stderr, labMissing)
		return 2
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// An interrupt at the terminal reaches stagger-lab too (one process
	// group), which prints what it measured and ends; this process waits
	// for it instead of ending first.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	}
	fmt.Fprintf(stderr, "stagger lab: %v\n", err)
	return 1
}
