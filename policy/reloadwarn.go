package policy

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// reloadWarnings returns why swapping next in for prev makes a reload with
// warnings (SourceEvent.Warnings): each name of next that matches no
// method the process served (served) and no proto file r declares (a
// misspelt service matches no call, and the calls it was meant for lose
// their policy in silence), and each method of a name of prev whose
// calls retried or hedged and under next do neither. nil for a clean
// reload; r nil skips the names' check.
func reloadWarnings(prev, next *Config, r ProtoResolver, served func(name string) bool) []string {
	var out []string
	if r != nil {
		for _, name := range next.Names() {
			if name != "" && !declared(r, name) && !served(name) {
				out = append(out, fmt.Sprintf("%s: names no method the process served or the known proto files declare", entryName(name)))
			}
		}
	}
	for _, name := range prev.Names() {
		if !retries(prev.methods[name]) {
			continue
		}
		for _, m := range methodsOf(r, name, served) {
			if retries(prev.Method(m)) && !retries(next.Method(m)) {
				out = append(out, fmt.Sprintf("%s: retried under the previous file, not retried now", entryName(m)))
			}
		}
	}
	return out
}

// methodsOf returns the names a check of name covers: for a service
// ("/svc/") r declares, each of its methods, so that a file that narrows
// a service's entry to some of its methods names the others; none for a
// name r does not declare and the process did not serve (it covered no
// call: fixing its typo turns no retries off); name without r, for the
// default entry, and for a name served but not declared.
func methodsOf(r ProtoResolver, name string, served func(string) bool) []string {
	svc, meth := splitFullMethod(name)
	if r == nil || svc == "" {
		return []string{name}
	}
	if !declared(r, name) {
		if served(name) {
			return []string{name}
		}
		return nil
	}
	if meth != "" {
		return []string{name}
	}
	d, _ := r.FindDescriptorByName(protoreflect.FullName(svc))
	sd := d.(protoreflect.ServiceDescriptor)
	ms := sd.Methods()
	out := make([]string, 0, ms.Len())
	for i := range ms.Len() {
		out = append(out, name+string(ms.Get(i).Name()))
	}
	return out
}

// retries reports whether m retries or hedges.
func retries(m *Method) bool { return m != nil && (m.Retry != nil || m.Hedging != nil) }

// declared reports whether r declares name ("/svc/" or "/svc/method").
func declared(r ProtoResolver, name string) bool {
	svc, meth := splitFullMethod(name)
	d, _ := r.FindDescriptorByName(protoreflect.FullName(svc))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	return ok && (meth == "" || sd.Methods().ByName(protoreflect.Name(meth)) != nil)
}

// entryName is name as a warning shows it: "/svc/method", "/svc/", or the
// default entry.
func entryName(name string) string {
	if name == "" {
		return "the default entry ({})"
	}
	return fmt.Sprintf("%q", name)
}

// warnedReload is what Warned returns; claimed says ClaimWarned gave it.
type warnedReload struct {
	n       uint64
	ev      SourceEvent
	claimed atomic.Bool
}

// judge records ev, a swap just made, as a reload with warnings when it
// has some, else forgets the last one (its config is no longer in use).
// The caller holds mu.
func (s *Source) judge(ev *SourceEvent) {
	ev.Warnings = strings.Join(reloadWarnings(ev.Previous, ev.Config, s.opts.protoResolver(), s.served.has), "\n")
	var n uint64
	last := s.warned.Load()
	if last != nil {
		n = last.n
	}
	switch {
	case ev.Warnings != "":
		s.warned.Store(&warnedReload{n: n + 1, ev: *ev})
	case last != nil && last.ev.Config != nil:
		s.warned.Store(&warnedReload{n: n})
	}
}

// Warned returns the latest reload with warnings (SourceEvent.Warnings: a
// name that matches no method the process called (Served) and no known
// proto file declares, or a method whose retries the new file turned off) while its config is still in use, and n, the number
// of such reloads so far. Such a reload swapped its config in, as any
// valid file is; it is not a plain success either. The interceptors log it
// at error level when a call first follows its config (without a logger,
// through slog.Default(), once: ClaimWarned); staggerotel counts it as
// result "warned".
func (s *Source) Warned() (n uint64, ev SourceEvent) {
	if s == nil {
		return 0, SourceEvent{}
	}
	if w := s.warned.Load(); w != nil {
		return w.n, w.ev
	}
	return 0, SourceEvent{}
}

// ClaimWarned is Warned for a reporter that many readers of the Source
// share: ok is true for one caller only per reload with warnings, the
// first to claim it, as ClaimRefused is for refusals.
func (s *Source) ClaimWarned() (ev SourceEvent, ok bool) {
	if s == nil {
		return SourceEvent{}, false
	}
	w := s.warned.Load()
	if w == nil || w.ev.Config == nil || w.claimed.Load() || w.claimed.Swap(true) {
		return SourceEvent{}, false
	}
	return w.ev, true
}

// servedMax bounds the methods a Source remembers as served: a program
// that makes up method names at run time must not grow the set without
// end (past it, new ones are not kept: their names may count as naming no
// method).
const servedMax = 1024

// servedSet holds the methods the process called through the
// interceptors that follow a Source, and their services.
type servedSet struct {
	m sync.Map // "/svc/method" and "/svc/"
	n atomic.Int64
}

func (s *servedSet) add(fullMethod string) {
	if _, ok := s.m.Load(fullMethod); ok || s.n.Load() >= servedMax {
		return
	}
	if _, loaded := s.m.LoadOrStore(fullMethod, struct{}{}); !loaded {
		s.n.Add(1)
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		s.m.LoadOrStore(fullMethod[:i+1], struct{}{})
	}
}

// has reports whether name ("/svc/method" or "/svc/") was served.
func (s *servedSet) has(name string) bool {
	_, ok := s.m.Load(name)
	return ok
}

// Served tells the Source that the process called fullMethod
// ("/pkg.Service/Method"), so that a reload whose file names it or its
// service does not count as naming no method (Warned), though no known
// proto file declares it: a client that calls services whose protos it
// does not link (a generic proxy) names them rightly. The interceptors
// that follow the Source call it for each method they call. It keeps the
// first 1,024 methods. Safe for concurrent use; a nil Source ignores it.
func (s *Source) Served(fullMethod string) {
	if s == nil || fullMethod == "" {
		return
	}
	s.served.add(fullMethod)
}
