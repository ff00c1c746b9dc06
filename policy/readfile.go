package policy

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// maxFileSize bounds a policy file: 4 MiB. The largest service configs
// seen hold some hundred entries in a few dozen KiB, and the poller reads
// and hashes the file every second, so a larger one is no policy, and
// refusing it keeps a mistake (a log file given as the path) from
// costing a Source its memory.
const maxFileSize = 4 << 20

// errTooLarge is the rule a file or document past maxFileSize breaks.
func errTooLarge(size string) error {
	return fmt.Errorf("%s, over the bound of %d bytes (4 MiB) on a policy file", size, maxFileSize)
}

// readFile reads the policy file at path for LoadFile, WatchFile and a
// Source's reloads. Only a regular file is read: a named pipe with no
// writer would block the read (and the Source's reloads and Close behind
// it) for ever, and a device may never end. The mode is checked before
// the file is opened, and again on the file opened (without blocking, so
// that a pipe put in its place between the two is refused too, never
// waited on). A file larger than maxFileSize is refused without being read
// whole: from its size when it is known, else after maxFileSize+1 bytes.
func readFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if err := checkRegular(path, fi); err != nil {
		return nil, err
	}
	if fi.Size() > maxFileSize {
		return nil, tooLarge(path, fmt.Sprintf("%d bytes", fi.Size()))
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if err := checkRegular(path, fi); err != nil {
		return nil, err
	}
	// The file may have grown since its size was read.
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, tooLarge(path, fmt.Sprintf("more than %d bytes", maxFileSize))
	}
	return data, nil
}

// tooLarge refuses the file at path, of size.
func tooLarge(path, size string) error {
	return fmt.Errorf("policy: %w", &fs.PathError{Op: "read", Path: path, Err: errTooLarge(size)})
}

// checkRegular refuses a file that is not a regular one, naming its kind.
func checkRegular(path string, fi fs.FileInfo) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("policy: %w", &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%s, not a regular file: only regular files are read", fileKind(fi.Mode()))})
}

// fileKind names the kind of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a file of mode " + m.String()
}
