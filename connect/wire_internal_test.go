package staggerconnect

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
)

// A connect.Request is copied once, when the client is built, and checked:
// the copy keeps the message and gets a header of its own; a request that
// cannot be copied is ErrRequestCopy, with the reason.
func TestRequestCopyChecked(t *testing.T) {
	if err := requestCopies(); err != nil {
		t.Fatalf("this connect-go's request does not copy: %v", err)
	}
	err := checkCopy((*connect.Request[emptypb.Empty])(nil))
	if !errors.Is(err, ErrRequestCopy) || !strings.Contains(err.Error(), "cannot copy a request of type") {
		t.Errorf("checkCopy(nil request) = %v, want ErrRequestCopy with the reason", err)
	}
}
