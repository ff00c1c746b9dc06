package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// testCA issues the certificates of a TLS test: made in memory, no files.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "stagger test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

var certSerial atomic.Int64

// issue returns a leaf certificate signed by ca (ca nil: self-signed) for
// the template's names.
func (ca *testCA) issue(t testing.TB, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(100 + certSerial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsBench serves a Get behind WithIdempotency over loopback TCP with TLS;
// the handler counts its runs and answers with the caller's certificate
// name, in the reply, a header and a trailer.
type tlsBench struct {
	ca   *testCA
	addr string
	runs atomic.Int64
}

// newTLSBench serves with clientAuth (tls.RequireAndVerifyClientCert: the
// callers' certificates are verified against the test CA).
func newTLSBench(t *testing.T, clientAuth tls.ClientAuthType, o server.IdempotencyOptions) *tlsBench {
	t.Helper()
	b := &tlsBench{ca: newTestCA(t)}
	srvCert := b.ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "server"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	cfg := &tls.Config{
		Certificates: []tls.Certificate{srvCert},
		ClientAuth:   clientAuth,
		ClientCAs:    b.ca.pool,
		MinVersion:   tls.VersionTLS13,
	}
	if clientAuth == tls.RequireAnyClientCert {
		// No acceptable CAs named: the client sends whatever it has.
		cfg.ClientCAs = nil
	}
	creds := credentials.NewTLS(cfg)
	h := &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		n := b.runs.Add(1)
		who := "anonymous"
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
				who = ti.State.PeerCertificates[0].Subject.CommonName
			}
		}
		_ = grpc.SetHeader(ctx, metadata.Pairs("caller", who, "run", fmt.Sprint(n)))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("trailer-caller", who))
		return &testingv1.GetResponse{Reply: &testingv1.Reply{Key: who, Seq: n}}, nil
	}}
	side := newSide(t, server.WithIdempotency(memStore(t), o))
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(creds)}, side.ServerOptions()...)...)
	testingv1.RegisterTestServiceServer(g, h)
	lis, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	b.addr = lis.Addr().String()
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return b
}

// client dials the bench over TLS with cert (none when cert is nil), as a
// raw client: no retries, so that each Get is one request.
func (b *tlsBench) client(t *testing.T, cert *tls.Certificate) testingv1.TestServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: b.ca.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	cc, err := grpc.NewClient("passthrough:///"+b.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithDisableRetry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testingv1.NewTestServiceClient(cc)
}

// get sends the same message ("write") with key.
func getWithKey(t *testing.T, cl testingv1.TestServiceClient, key string) result {
	t.Helper()
	var r result
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), server.DefaultIdempotencyHeader, key), 10*time.Second)
	defer cancel()
	r.resp, r.err = cl.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "write"}}, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	if r.err != nil {
		t.Fatalf("Get with key %q: %v", key, r.err)
	}
	return r
}

// checkReply fails the test unless r is the outcome of run n for caller
// who: its reply, header and trailer, replayed or not.
func checkReply(t *testing.T, what string, r result, who string, n int64, replayed bool) {
	t.Helper()
	if r.resp.GetReply().GetKey() != who || r.resp.GetReply().GetSeq() != n {
		t.Errorf("%s: reply %v, want run %d of %s", what, r.resp.GetReply(), n, who)
	}
	if got := r.header.Get("caller"); len(got) != 1 || got[0] != who {
		t.Errorf("%s: header caller %q, want only %q", what, got, who)
	}
	if got := r.header.Get("run"); len(got) != 1 || got[0] != fmt.Sprint(n) {
		t.Errorf("%s: header run %q, want only %d", what, got, n)
	}
	if got := r.trailer.Get("trailer-caller"); len(got) != 1 || got[0] != who {
		t.Errorf("%s: trailer trailer-caller %q, want only %q", what, got, who)
	}
	if got := len(r.header.Get(server.ReplayedHeader)) > 0; got != replayed {
		t.Errorf("%s: replayed %v, want %v", what, got, replayed)
	}
}

// TestScopeByClientCertificate: over loopback TCP with TLS, two callers
// with verified client certificates (one named by its subject, one by a
// SPIFFE ID) send the same key and message. Each runs the handler once and
// gets its own reply, headers and trailers; each one's retry replays its
// own outcome, never the other's.
func TestScopeByClientCertificate(t *testing.T) {
	b := newTLSBench(t, tls.RequireAndVerifyClientCert, server.IdempotencyOptions{})
	certA := b.ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}})
	certB := b.ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "bob"}, URIs: []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/bob"}}})
	alice, bob := b.client(t, &certA), b.client(t, &certB)

	checkReply(t, "alice", getWithKey(t, alice, "k"), "alice", 1, false)
	checkReply(t, "bob, alice's key", getWithKey(t, bob, "k"), "bob", 2, false)
	checkReply(t, "alice's retry", getWithKey(t, alice, "k"), "alice", 1, true)
	checkReply(t, "bob's retry", getWithKey(t, bob, "k"), "bob", 2, true)
	if n := b.runs.Load(); n != 2 {
		t.Errorf("%d runs, want 2 (one per caller)", n)
	}
}

// logBuffer is a slog handler's output, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

const sharedWarning = "keys of callers without a verified TLS client certificate are shared"

// TestScopeWithoutVerifiedCertificate: callers without a verified client
// certificate share one scope, which the logger is told once, at the first
// such request with a key. A certificate the server did not verify
// (tls.RequireAnyClientCert) is no identity: its subject names whoever
// made it.
func TestScopeWithoutVerifiedCertificate(t *testing.T) {
	t.Run("unverified", func(t *testing.T) {
		var log logBuffer
		b := newTLSBench(t, tls.RequireAnyClientCert, server.IdempotencyOptions{Logger: log.logger()})
		var ca *testCA // self-signed: nobody vouches for the names
		alice := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}})
		mallory := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "mallory"}})
		checkReply(t, "alice", getWithKey(t, b.client(t, &alice), "k"), "alice", 1, false)
		if got := strings.Count(log.String(), sharedWarning); got != 1 {
			t.Errorf("after the first keyed request: %d warnings, want 1; log:\n%s", got, log.String())
		}
		checkReply(t, "mallory, alice's key (shared: no identity)", getWithKey(t, b.client(t, &mallory), "k"), "alice", 1, true)
		getWithKey(t, b.client(t, &mallory), "k2")
		if got := strings.Count(log.String(), sharedWarning); got != 1 {
			t.Errorf("after three keyed requests: %d warnings, want 1; log:\n%s", got, log.String())
		}
	})
	t.Run("mixed", func(t *testing.T) {
		// A server that verifies certificates when given: the callers
		// with one are scoped, those without share the scope "".
		var log logBuffer
		b := newTLSBench(t, tls.VerifyClientCertIfGiven, server.IdempotencyOptions{Logger: log.logger()})
		alice := b.ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}})
		checkReply(t, "alice", getWithKey(t, b.client(t, &alice), "k"), "alice", 1, false)
		if log.String() != "" {
			t.Errorf("a verified caller was warned about: %s", log.String())
		}
		checkReply(t, "anonymous, alice's key", getWithKey(t, b.client(t, nil), "k"), "anonymous", 2, false)
		checkReply(t, "another anonymous", getWithKey(t, b.client(t, nil), "k"), "anonymous", 2, true)
		checkReply(t, "alice's retry", getWithKey(t, b.client(t, &alice), "k"), "alice", 1, true)
		if got := strings.Count(log.String(), sharedWarning); got != 1 {
			t.Errorf("%d warnings, want 1; log:\n%s", got, log.String())
		}
	})
}

// tenantScope is a Scope of the tests: the request's tenant header.
func tenantScope(ctx context.Context) (string, error) {
	v := metadata.ValueFromIncomingContext(ctx, "tenant")
	if len(v) != 1 {
		return "", errors.New("want one tenant header")
	}
	return v[0], nil
}

func withTenant(tenant string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "tenant", tenant)
}

// TestScopeFunction: with Scope set, tenants that pick the same key for the
// same request each run the handler and get their own reply, headers and
// trailers; a tenant's retry replays its own. Scopes that a plain
// concatenation with the key would confuse stay apart, and nothing is
// logged.
func TestScopeFunction(t *testing.T) {
	var log logBuffer
	b := newDedupBench(t, memStore(t), server.IdempotencyOptions{Scope: tenantScope, Logger: log.logger()})
	check := func(what string, r result, run int64, replayed bool) {
		t.Helper()
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		if r.resp.GetReply().GetSeq() != run || r.header.Get("run")[0] != fmt.Sprint(run) || len(r.header.Get("run")) != 1 ||
			r.trailer.Get("trailer-run")[0] != fmt.Sprint(run) || len(r.trailer.Get("trailer-run")) != 1 {
			t.Errorf("%s: reply %v, header %v, trailer %v; want run %d's alone", what, r.resp.GetReply(), r.header, r.trailer, run)
		}
		if got := len(r.header.Get(server.ReplayedHeader)) > 0; got != replayed {
			t.Errorf("%s: replayed %v, want %v", what, got, replayed)
		}
	}
	check("acme", b.getCtx(withTenant("acme"), "request-1", "ok"), 1, false)
	check("globex, acme's key", b.getCtx(withTenant("globex"), "request-1", "ok"), 2, false)
	check("acme's retry", b.getCtx(withTenant("acme"), "request-1", "ok"), 1, true)
	check("globex's retry", b.getCtx(withTenant("globex"), "request-1", "ok"), 2, true)
	// "a" with key "bk" and "ab" with key "k" concatenate alike.
	check("a, key bk", b.getCtx(withTenant("a"), "bk", "ok"), 3, false)
	check("ab, key k", b.getCtx(withTenant("ab"), "k", "ok"), 4, false)
	if log.String() != "" {
		t.Errorf("logged with Scope set: %s", log.String())
	}
}

// TestScopeFunctionRefuses: a Scope that fails refuses the keyed request
// with UNAUTHENTICATED (or the status it returned, unchanged), without
// running the handler or storing anything; a request without a key does
// not ask it.
func TestScopeFunctionRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		code    codes.Code
		message string
	}{
		{"plain error", errors.New("no tenant"), codes.Unauthenticated, "server: idempotency key's scope (IdempotencyOptions.Scope): no tenant"},
		{"status", status.Error(codes.PermissionDenied, "tenant suspended"), codes.PermissionDenied, "tenant suspended"},
		{"status OK", okStatusError{}, codes.Unauthenticated, "server: idempotency key's scope (IdempotencyOptions.Scope): an error whose status is OK"},
		{"wrapped status", fmt.Errorf("auth: %w", status.Error(codes.PermissionDenied, "tenant suspended")), codes.PermissionDenied, "auth: rpc error: code = PermissionDenied desc = tenant suspended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memStore(t)
			var asked atomic.Int64
			b := newDedupBench(t, store, server.IdempotencyOptions{Scope: func(context.Context) (string, error) {
				asked.Add(1)
				return "", tc.err
			}})
			r := b.get("k", "ok")
			if st := status.Convert(r.err); st.Code() != tc.code || st.Message() != tc.message {
				t.Errorf("refused with %v %q, want %v %q", st.Code(), st.Message(), tc.code, tc.message)
			}
			if n, _ := store.Len(); n != 0 || b.runs.Load() != 0 {
				t.Errorf("%d entries stored, %d runs; want none", n, b.runs.Load())
			}
			if r := b.get("", "ok"); r.err != nil || b.runs.Load() != 1 || asked.Load() != 1 {
				t.Errorf("without a key: %v, %d runs, Scope asked %d times; want a run and Scope asked once (by the keyed one)", r.err, b.runs.Load(), asked.Load())
			}
		})
	}
}

// okStatusError is an error whose gRPC status says OK.
type okStatusError struct{}

func (okStatusError) Error() string              { return "an error whose status is OK" }
func (okStatusError) GRPCStatus() *status.Status { return status.New(codes.OK, "") }

// TestStoreKey: a fixed-length hash of the scope, a colon, the key; pairs
// that concatenate alike stay apart.
func TestStoreKey(t *testing.T) {
	k := server.StoreKey("spiffe://example.org/a", "request-1")
	if len(k) != 43+1+len("request-1") || !strings.HasSuffix(k, ":request-1") {
		t.Errorf("StoreKey = %q, want 43 bytes of hash, a colon and the key", k)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			t.Fatalf("StoreKey = %q: byte %d is not printable", k, i)
		}
	}
	seen := map[string][2]string{}
	for _, p := range [][2]string{{"a", "bk"}, {"ab", "k"}, {"", "abk"}, {"abk", ""}, {"a:", "bk"}, {"a", ":bk"}, {"\x00", "k"}, {"", "k"}} {
		sk := server.StoreKey(p[0], p[1])
		if q, dup := seen[sk]; dup {
			t.Errorf("StoreKey(%q, %q) = StoreKey(%q, %q)", p[0], p[1], q[0], q[1])
		}
		seen[sk] = p
	}
}
