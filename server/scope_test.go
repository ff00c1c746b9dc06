package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

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
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{srvCert},
		ClientAuth:   clientAuth,
		ClientCAs:    b.ca.pool,
		MinVersion:   tls.VersionTLS13,
	})
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
