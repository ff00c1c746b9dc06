package policy

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// ProtoResolver is what the name check needs of a set of proto files.
// *protoregistry.Files implements it: protoregistry.GlobalFiles (the files
// the program links, the default), or files built from a descriptor set
// with protodesc.NewFiles.
type ProtoResolver interface {
	FindDescriptorByName(protoreflect.FullName) (protoreflect.Descriptor, error)
	RangeFiles(func(protoreflect.FileDescriptor) bool)
}

// WithProtoFiles checks the service and method names of a file against r
// instead of protoregistry.GlobalFiles; nil turns the check off.
//
// The check warns, and under Strict fails the parse: a program may load a
// file before it registers the services it names (or name services of
// other programs that share the file), and a name the registry does not
// know is then no mistake. But a name the registry almost knows ("TestService" for
// "stagger.testing.v1.TestService", "get" for "Get") matches no call, and
// the warning says which name was likely meant.
func WithProtoFiles(r ProtoResolver) ParseOption {
	return func(o *parseOptions) {
		if f, ok := r.(*protoregistry.Files); ok && f == nil {
			r = nil
		}
		o.protos, o.protosSet = r, true
	}
}

// protoResolver is the resolver the options choose.
func (o *parseOptions) protoResolver() ProtoResolver {
	if o.protosSet {
		return o.protos
	}
	return protoregistry.GlobalFiles
}

// checkName warns when a methodConfig name is not a service (or a method of
// a service) that the proto files declare, and suggests the names likely
// meant.
func (w *walker) checkName(path, svc, meth string) {
	r := w.opts.protoResolver()
	if r == nil || svc == "" {
		return
	}
	d, _ := r.FindDescriptorByName(protoreflect.FullName(svc))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		hint := didYouMean(w.serviceSuggestions(r, svc))
		if w.opts.strict {
			if hint == "" {
				hint = "; WithProtoFiles(nil) turns the name check off"
			}
			w.fail(join(path, "service"), "must be a service the known proto files declare (Strict"+hint+")", svc)
			return
		}
		if hint == "" {
			w.warn(join(path, "service"), "service %q is not declared in the known proto files (no mistake if the program registers it later; WithProtoFiles(nil) turns this check off)", svc)
			return
		}
		w.warnTypo(join(path, "service"), "service %q is not declared in the known proto files%s (a service is named with its proto package)", svc, hint)
		return
	}
	if meth == "" || sd.Methods().ByName(protoreflect.Name(meth)) != nil {
		return
	}
	var names []string
	ms := sd.Methods()
	for i := 0; i < ms.Len(); i++ {
		names = append(names, string(ms.Get(i).Name()))
	}
	hint := didYouMean(closest(meth, names, func(string) string { return "" }))
	if w.opts.strict {
		w.fail(join(path, "method"), "must be a method of "+svc+" (Strict"+hint+")", meth)
		return
	}
	// The service is declared: a method it lacks is a mistake, near a
	// name or not.
	w.warnTypo(join(path, "method"), "method %q is not a method of %s%s", meth, svc, hint)
}

// serviceSuggestions lists the services of r that svc likely means: the
// same name but for case or package, or within 2 edits.
func (w *walker) serviceSuggestions(r ProtoResolver, svc string) []string {
	if w.services == nil {
		w.services = []string{}
		r.RangeFiles(func(f protoreflect.FileDescriptor) bool {
			ss := f.Services()
			for i := 0; i < ss.Len(); i++ {
				w.services = append(w.services, string(ss.Get(i).FullName()))
			}
			return true
		})
	}
	return closest(svc, w.services, func(full string) string { return full[strings.LastIndexByte(full, '.')+1:] })
}

// closest returns the names likely meant by name: those equal to it but for
// case, or whose short form (short(n), when not "") equals name's last
// component but for case; failing those, the names within 2 edits of it
// (and a third of their length), ignoring case.
func closest(name string, names []string, short func(string) string) []string {
	last := name[strings.LastIndexByte(name, '.')+1:]
	var same, near []string
	for _, n := range names {
		if strings.EqualFold(n, name) || short(n) != "" && strings.EqualFold(short(n), last) {
			same = append(same, n)
		} else if d := editDistance(strings.ToLower(n), strings.ToLower(name)); d <= 2 && 3*d <= len(n) {
			near = append(near, n)
		}
	}
	if len(same) > 0 {
		return same
	}
	return near
}

// didYouMean is ` (did you mean "a" or "b"?)`, naming at most three, or ""
// for none.
func didYouMean(names []string) string {
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	if len(names) > 3 {
		names = names[:3]
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "; did you mean " + strings.Join(q, " or ") + "?"
}

// NearlyNamed returns the name of the file ("/svc/method" or "/svc/") that
// nearly names fullMethod ("/pkg.Service/Method") without naming it: the
// same but for case, or without its package, or within 2 edits of its
// service or its method, so a
// call the file was likely meant to cover and does not. "" when the file
// names fullMethod exactly, or names nothing like it. Of several, the first
// in sort order. A nil Config returns "".
func (c *Config) NearlyNamed(fullMethod string) string {
	if c == nil || fullMethod == "" {
		return ""
	}
	if _, ok := c.methods[fullMethod]; ok {
		return ""
	}
	svc, meth := splitFullMethod(fullMethod)
	// A file that names the call's service spells it right: then only
	// its methods can be near misses.
	var nearSvc, nearMeth []string
	svcNamed := false
	for name := range c.methods {
		if name == "" {
			continue
		}
		nsvc, nmeth := splitFullMethod(name)
		switch {
		case nsvc == svc && nmeth == "":
			return "" // the call's service is named: the call follows it
		case nsvc == svc && nearName(nmeth, meth):
			nearMeth = append(nearMeth, name)
		case nsvc == svc:
			svcNamed = true
		case (nmeth == "" || nmeth == meth) && nearName(nsvc, svc):
			nearSvc = append(nearSvc, name)
		}
	}
	near := nearMeth
	if len(near) == 0 && !svcNamed {
		near = nearSvc
	}
	if len(near) == 0 {
		return ""
	}
	sort.Strings(near)
	return near[0]
}

// splitFullMethod splits "/svc/method" (or "/svc/") into its service and
// method.
func splitFullMethod(full string) (svc, meth string) {
	full = strings.TrimPrefix(full, "/")
	svc, meth, _ = strings.Cut(full, "/")
	return svc, meth
}

// nearName reports whether a, a name in a file, nearly names b: equal but
// for case, or within 2 edits and a third of a's length.
func nearName(a, b string) bool {
	if a == b || a == "" || b == "" {
		return false
	}
	if !strings.Contains(a, ".") && strings.EqualFold(a, b[strings.LastIndexByte(b, '.')+1:]) {
		return true // a service named without its package
	}
	d := editDistance(strings.ToLower(a), strings.ToLower(b))
	return d <= 2 && 3*d <= len(a)
}
