package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"strconv"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// scopeHashLen is the length of StoreKey's hash: 32 bytes in base64url.
const scopeHashLen = 43

// StoreKey is the key Dedup hands a Store for an idempotency key sent by a
// caller of scope: the unpadded base64url SHA-256 of scope (43 bytes), a
// colon, then key. The hash has a fixed length, so no (scope, key) pair
// can spell another's StoreKey, and a scope of any length or bytes (a
// certificate's subject) costs 43 printable bytes and is not kept in the
// clear. A Store treats it as an opaque string; StoreKey is exported for
// tests and for operators who look an entry up (in Redis: the store's
// Prefix, then StoreKey).
func StoreKey(scope, key string) string {
	h := sha256.Sum256([]byte(scope))
	var enc [scopeHashLen]byte
	base64.RawURLEncoding.Encode(enc[:], h[:])
	// One allocation: a Builder's String does not copy.
	var b strings.Builder
	b.Grow(scopeHashLen + 1 + len(key))
	b.Write(enc[:])
	b.WriteByte(':')
	b.WriteString(key)
	return b.String()
}

// peerScope is the default scope: the verified TLS client certificate of
// the caller, when it has one. Only a verified chain counts: a certificate
// the server did not check against its ClientCAs (tls.RequestClientCert,
// tls.RequireAnyClientCert) names whoever made it.
//
// A leaf with URI SANs (a SPIFFE ID) is named by them: they are what the
// identity is, and a SPIFFE trust domain's intermediates rotate. Any
// other is named by its subject and its issuer, since two CAs the server
// trusts may each issue the same subject to different callers. The two
// forms are tagged and the subject length-prefixed, so no certificate's
// scope can spell another's.
func peerScope(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return "", false
	}
	var chains [][]*x509.Certificate
	switch ti := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		chains = ti.State.VerifiedChains
	case *credentials.TLSInfo:
		if ti == nil {
			return "", false
		}
		chains = ti.State.VerifiedChains
	default:
		return "", false
	}
	if len(chains) == 0 || len(chains[0]) == 0 || chains[0][0] == nil {
		return "", false
	}
	leaf := chains[0][0]
	if len(leaf.URIs) > 0 {
		b := []byte("uri")
		for _, u := range leaf.URIs {
			b = appendField(b, u.String())
		}
		return string(b), true
	}
	b := appendField([]byte("subject"), leaf.Subject.String())
	return string(appendField(b, leaf.Issuer.String())), true
}

// appendField appends a space, v's length, a space and v: whatever bytes
// a name holds, the fields that follow cannot be mistaken for part of it.
func appendField(b []byte, v string) []byte {
	b = strconv.AppendInt(append(b, ' '), int64(len(v)), 10)
	return append(append(b, ' '), v...)
}
