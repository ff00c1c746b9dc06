package lab

import (
	"runtime/debug"

	"google.golang.org/grpc"
)

// Module is a module the lab's contenders come from, with the version this
// program was built with.
type Module struct {
	// Path is the module path.
	Path string
	// Version is the module's version ("v1.85.0"), or "unknown" when the
	// program carries no build information for it (test binaries carry
	// none; grpc-go's own is always known, from grpc.Version).
	Version string
}

// peerModules are the modules the contenders other than stagger come from.
var peerModules = []string{
	"google.golang.org/grpc",
	"github.com/grpc-ecosystem/go-grpc-middleware/v2",
	"github.com/failsafe-go/failsafe-go",
	"google.golang.org/protobuf",
}

// Versions reports the versions of the modules the contenders come from, so
// that every figure the lab prints says which peers it measured.
func Versions() []Module {
	var deps []*debug.Module
	if info, ok := debug.ReadBuildInfo(); ok {
		deps = info.Deps
	}
	return versionsOf(deps)
}

func versionsOf(deps []*debug.Module) []Module {
	out := make([]Module, len(peerModules))
	for i, path := range peerModules {
		out[i] = Module{Path: path, Version: "unknown"}
		if path == "google.golang.org/grpc" {
			out[i].Version = "v" + grpc.Version
		}
		for _, d := range deps {
			if d.Path != path {
				continue
			}
			if d.Replace != nil {
				d = d.Replace
			}
			if d.Version != "" {
				out[i].Version = d.Version
			}
		}
	}
	return out
}
