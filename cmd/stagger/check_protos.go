package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/reporter"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// loadDescriptorSet reads a FileDescriptorSet. Files whose imports the set
// lacks (protoc without --include_imports) are kept: their unresolved types
// do not matter to service and method names.
func loadDescriptorSet(path string) (*protoregistry.Files, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("%s is not a FileDescriptorSet: %w", path, err)
	}
	files, err := protodesc.FileOptions{AllowUnresolvable: true}.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return files, nil
}

// giveProtos says how to give check the protos it checks names against.
const giveProtos = "give the protos: -proto FILE.proto (with -proto-path DIR for its imports), or -descriptor-set FILE (written by `buf build -o FILE` or `protoc --include_imports --descriptor_set_out=FILE`)"

// stringsFlag is a repeatable flag: each use adds a value.
type stringsFlag []string

func (f *stringsFlag) String() string { return strings.Join(*f, ",") }

func (f *stringsFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// compileProtos compiles the .proto source files protoFiles, their imports
// found under protoPaths (google/protobuf's own files are built in), and
// adds them and their imports to files (a new registry when nil). A file
// is named, as protoc names it, by its path under the first proto path
// that holds it. Without protoPaths, the current directory is the proto
// path, and a file outside it adds its own directory.
func compileProtos(files *protoregistry.Files, protoFiles, protoPaths []string) (*protoregistry.Files, error) {
	implicit := len(protoPaths) == 0
	if implicit {
		protoPaths = []string{"."}
	}
	names := make([]string, len(protoFiles))
	for i, f := range protoFiles {
		name, err := protoName(f, protoPaths)
		if err != nil && implicit {
			protoPaths = append(protoPaths, filepath.Dir(f))
			name, err = protoName(f, protoPaths)
		}
		if err != nil {
			return nil, err
		}
		names[i] = name
	}
	var errs []error
	compiler := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: protoPaths}),
		// Every error, not only the first, each placed (file:line:col).
		Reporter: reporter.NewReporter(func(err reporter.ErrorWithPos) error { errs = append(errs, err); return nil }, nil),
	}
	compiled, err := compiler.Compile(context.Background(), names...)
	if len(errs) > 0 {
		err := errors.Join(errs...)
		if strings.Contains(err.Error(), "editions are not yet supported") {
			// The compiler linked here (protocompile v0.8.0, which keeps
			// the core module at protobuf v1.33) reads proto2 and proto3.
			err = fmt.Errorf("%w\n(this command compiles proto2 and proto3 sources; for a file with an edition, give a descriptor set: -descriptor-set FILE, from `buf build -o FILE` or `protoc --include_imports --descriptor_set_out=FILE`)", err)
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	if files == nil {
		files = new(protoregistry.Files)
	}
	var add func(f protoreflect.FileDescriptor) error
	add = func(f protoreflect.FileDescriptor) error {
		if _, err := files.FindFileByPath(f.Path()); err == nil {
			return nil
		}
		imps := f.Imports()
		for i := 0; i < imps.Len(); i++ {
			if err := add(imps.Get(i).FileDescriptor); err != nil {
				return err
			}
		}
		return files.RegisterFile(f)
	}
	for _, f := range compiled {
		if err := add(f); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// protoName is the name protoc gives file: its path relative to the first
// of protoPaths that holds it.
func protoName(file string, protoPaths []string) (string, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", err
	}
	for _, p := range protoPaths {
		dir, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if rel, err := filepath.Rel(dir, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return filepath.ToSlash(rel), nil
		}
	}
	return "", fmt.Errorf("%s is not under any -proto-path (%s): a .proto file is named by its path under one", file, strings.Join(protoPaths, ", "))
}
