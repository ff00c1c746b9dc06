//go:build !unix

package policy

// openNonblock: no named pipe blocks an open here.
const openNonblock = 0
