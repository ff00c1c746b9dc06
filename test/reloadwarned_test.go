//go:build go1.25

package test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/testserver"
)

// A reload that swaps in a file misspelling the service (TestServce) turns
// the service's retries off: it reaches slog.Default() at error level,
// once in the process however many connections follow the Source, with
// the reasons; given a logger, the logger hears it at error level, once
// per connection (its interceptors' State), as a refused reload. A clean
// reload after it says nothing. Before, the file was a plain
// success, said only by two warnings.
func TestWarnedReloadIsLogged(t *testing.T) {
	const msg = "stagger: policy file reloaded with warnings"
	for _, withLogger := range []bool{false, true} {
		rec := &slogRecords{}
		old := slog.Default()
		slog.SetDefault(slog.New(rec))
		t.Cleanup(func() { slog.SetDefault(old) })
		synctest.Test(t, func(t *testing.T) {
			src, path, write := watchedFile(t, sourceFile(3, ""))
			srv := testserver.New()
			defer srv.Close()
			var log logLines
			var opts []interceptor.Option
			if withLogger {
				opts = append(opts, interceptor.WithLogger(log.logger()))
			}
			var ccs []*grpc.ClientConn
			for range 2 {
				cc, err := srv.Dial(stagger.DialOptionsFromSource(src, opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				ccs = append(ccs, cc)
			}
			calls := func(round string) {
				t.Helper()
				for i, cc := range ccs {
					if _, err := getAttempts(t, srv, cc, round+string(rune('a'+i)), 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			heard := func() []string {
				if withLogger {
					return log.at(logging.LevelError, msg)
				}
				return rec.with("ERROR " + msg)
			}
			calls("before")
			write(strings.Replace(sourceFile(3, ""), "TestService", "TestServce", 1))
			if err := src.Reload(); err != nil {
				t.Fatal(err)
			}
			calls("typo")
			calls("typo again")
			want := 1
			if withLogger {
				want = len(ccs)
			}
			got := heard()
			if len(got) != want || !strings.Contains(got[0], "TestServce") || !strings.Contains(got[0], "TestService/Get") || !strings.Contains(got[0], path) {
				t.Fatalf("logger %v: heard %q, want %d errors naming the file, the misspelt service and the methods whose retries it turned off", withLogger, got, want)
			}
			if n, _ := getAttempts(t, srv, ccs[0], "typo-fails", 2); n != 1 {
				t.Fatalf("a call under the misspelt file made %d attempts, want 1 (its retries are off)", n)
			}
			write(sourceFile(3, ""))
			if err := src.Reload(); err != nil {
				t.Fatal(err)
			}
			calls("fixed")
			if got := heard(); len(got) != want {
				t.Errorf("logger %v: after a clean reload, heard %q, want only the first", withLogger, got)
			}
		})
	}
}

// A method the process called through the interceptors that follow a
// Source counts as served: a reload naming its service, which no linked
// proto declares (a client without the protos, a proxy), is a plain
// success, where a service never called is a reload with warnings.
func TestReloadNamingAServedMethodIsClean(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, _, write := watchedFile(t, sourceFile(3, ""))
		srv := testserver.New()
		defer srv.Close()
		cc, err := srv.Dial(stagger.DialOptionsFromSource(src)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if err := cc.Invoke(context.Background(), "/proxied.v1.Orders/Get", &emptypb.Empty{}, &emptypb.Empty{}); status.Code(err) != codes.Unimplemented {
			t.Fatalf("a call of a service the server lacks: %v, want UNIMPLEMENTED", err)
		}
		for i, svc := range []string{"proxied.v1.Orders", "proxied.v1.Never"} {
			write(strings.Replace(sourceFile(3, ""), `{"service": "stagger.testing.v1.TestService"}`,
				`{"service": "stagger.testing.v1.TestService"}, {"service": "`+svc+`"}`, 1))
			if err := src.Reload(); err != nil {
				t.Fatal(err)
			}
			n, ev := src.Warned()
			if want := uint64(i); n != want {
				t.Errorf("a file naming %s: %d reloads with warnings (%q), want %d", svc, n, ev.Warnings, want)
			}
		}
	})
}
