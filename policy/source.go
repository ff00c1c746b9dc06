package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPollInterval is how often WatchFile looks at its file unless
// WithPollInterval says otherwise.
const DefaultPollInterval = time.Second

// reloadSettle is how long a reload that finds a broken file waits before
// looking again: an editor's two-step write (truncate, then write) takes
// well under a millisecond, and a wait this short is nothing beside the
// poll interval.
const reloadSettle = 20 * time.Millisecond

// WithPollInterval sets how often WatchFile looks at its file. Zero or less
// turns polling off: the file is then read again only when Reload is called.
func WithPollInterval(d time.Duration) ParseOption {
	return func(o *parseOptions) {
		o.poll = d
		o.noPoll = d <= 0
	}
}

// WithPollTicks makes WatchFile look at its file on each value received from
// ticks instead of on a timer of its own, so tests and programs with their
// own clock drive the polling.
func WithPollTicks(ticks <-chan time.Time) ParseOption {
	return func(o *parseOptions) { o.ticks = ticks }
}

// OnReload registers fn to hear of every change a Source makes or refuses:
// a new config in use, a new file that could not be used (the last good
// config stays), or the end of such a refusal when the file comes back to
// the config in use (SourceEvent.Previous). fn runs outside the Source's locks, on the goroutine that
// reloaded, and gets its own copy of the event.
func OnReload(fn func(SourceEvent)) ParseOption {
	return func(o *parseOptions) { o.onReload = fn }
}

// SourceEvent tells of a change a Source made, or refused to make.
type SourceEvent struct {
	// Path is the file watched; "" for a Source made by NewSource.
	Path string
	// Config is the config now in use (the new one after a change, the last
	// good one after an error).
	Config *Config
	// Previous is the config in use before; nil after an error. After a
	// refusal, a file that holds the content of the config in use again
	// (it went missing and came back as it was) ends the refusal without
	// a swap: Previous is then Config itself.
	Previous *Config
	// Err is why a new file was not used; nil when Config is new.
	Err error
	// BudgetKept: the budget settings did not change (Config.BudgetSettings
	// are equal), so the interceptors following the Source keep every
	// backend's tokens and Gates (interceptor.State); or neither config
	// declares a budget (the interceptors' own budget, stagger.DialOptions'
	// default, stays in force). False after an error.
	BudgetKept bool
	// Warnings, after a change, says why it is a reload with warnings
	// (Source.Warned), one reason a line: each name of the new file that
	// matches no method the process called (Source.Served) and that no
	// known proto file declares (WithProtoFiles; a misspelt service
	// matches no call), and each method whose calls retried or hedged
	// under Previous and do neither under Config. "" for a clean change,
	// and after an error. (A string, so that SourceEvent stays comparable.)
	Warnings string
}

// Source holds the current Config of a policy file and swaps in a new one
// when the file changes, atomically: a caller sees the old Config or the new
// one, never a mix. A file that fails to parse leaves the last good Config in
// place and is reported through OnReload. A Config is data: the budgets and
// breakers live in the interceptors that follow the Source
// (interceptor.State), which keep each backend's state when the new file
// declares the same settings (SourceEvent.BudgetKept) and start afresh when
// it changes them.
//
// A Source is safe for concurrent use. Close stops its polling goroutine.
type Source struct {
	path string
	opts parseOptions
	cur  atomic.Pointer[Config]

	// reloading serialises reloads: their reads, parses and reports. It
	// is held across the read of the file, never mu, so that a slow read
	// holds up no Update.
	reloading sync.Mutex
	// lastHash is the content last read; zero after a read that failed,
	// so that whatever the file holds next is news.
	lastHash [sha256.Size]byte
	lastErr  string
	// mu serialises the changes to the config in use (cur, loaded,
	// warned, refused): a reload's and Update's.
	mu sync.Mutex
	// refused is the last refusal and how many there were (Refused).
	refused atomic.Pointer[refusal]
	// loaded is the config in use's generation and hash (Loaded), written
	// with cur under mu.
	loaded atomic.Pointer[loaded]
	// warned is the last reload with warnings and how many there were
	// (Warned), written with cur under mu.
	warned atomic.Pointer[warnedReload]
	// served holds the methods the process called (Served).
	served servedSet

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// NewSource returns a Source holding cfg, not backed by a file: Update swaps
// configs in. Only OnReload matters among opts.
func NewSource(cfg *Config, opts ...ParseOption) *Source {
	s := &Source{opts: buildParseOptions(opts)}
	s.cur.Store(cfg)
	s.loaded.Store(&loaded{generation: 1})
	return s
}

// WatchFile loads the policy file at path and returns a Source that polls it
// (every DefaultPollInterval unless WithPollInterval or WithPollTicks says
// otherwise) for changes of its content. The first load must succeed; later
// bad files keep the last good config. Close the Source when done.
func WatchFile(path string, opts ...ParseOption) (*Source, error) {
	s := &Source{path: path, opts: buildParseOptions(opts)}
	s.opts.format = formatFor(path, s.opts.format)
	s.opts.file = path
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfig(data, &s.opts)
	if err != nil {
		return nil, err
	}
	s.lastHash = sha256.Sum256(data)
	s.cur.Store(cfg)
	s.loaded.Store(&loaded{generation: 1, hash: hex.EncodeToString(s.lastHash[:])})
	if s.opts.ticks != nil || !s.opts.noPoll {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		ticks, stopTicker := s.opts.ticks, func() {}
		if ticks == nil {
			t := time.NewTicker(s.opts.poll)
			ticks, stopTicker = t.C, t.Stop
		}
		go s.poll(ticks, stopTicker)
	}
	return s, nil
}

func (s *Source) poll(ticks <-chan time.Time, stopTicker func()) {
	defer close(s.done)
	defer stopTicker()
	for {
		select {
		case <-s.stop:
			return
		case <-ticks:
			_ = s.Reload() // reported through OnReload
		}
	}
}

// Config returns the config in use. It never returns a half-applied config.
func (s *Source) Config() *Config {
	if s == nil {
		return nil
	}
	return s.cur.Load()
}

// Path returns the file watched ("" for a Source made by NewSource).
func (s *Source) Path() string { return s.path }

// Reload reads the file now and swaps in its config if the content changed
// and parses; it returns the parse or read error otherwise (the last good
// config stays). A content already seen, good or bad, is neither parsed
// nor reported again. Only a regular file is read: a named pipe, a device
// or a socket at the path is a refusal naming it, never a wait. For a
// Source made by NewSource it does nothing.
func (s *Source) Reload() error {
	if s.path == "" {
		return nil
	}
	s.reloading.Lock()
	ev, report, err := s.reload()
	s.reloading.Unlock()
	if report && s.opts.onReload != nil {
		s.opts.onReload(ev)
	}
	return err
}

// reload reads and parses the file and applies the result. The caller
// holds reloading, not mu: mu is taken only to apply.
func (s *Source) reload() (SourceEvent, bool, error) {
	ev := SourceEvent{Path: s.path}
	data, err := readFile(s.path)
	if err != nil {
		s.lastHash = [sha256.Size]byte{}
		return s.refuse(ev, err)
	}
	h := sha256.Sum256(data)
	if h == s.lastHash {
		return ev, false, nil
	}
	s.lastHash = h
	if ev, report, ok := s.recovered(ev, h); ok {
		return ev, report, nil
	}
	cfg, err := parseConfig(data, &s.opts)
	if err != nil {
		// An editor that writes in two steps (truncate, then write) shows
		// an empty or half-written file for a moment: look again once it
		// has settled before reporting it.
		time.Sleep(reloadSettle)
		if again, rerr := readFile(s.path); rerr == nil && sha256.Sum256(again) != h {
			s.lastHash = sha256.Sum256(again)
			if ev, report, ok := s.recovered(ev, s.lastHash); ok {
				return ev, report, nil
			}
			cfg, err = parseConfig(again, &s.opts)
		}
	}
	if err != nil {
		s.lastErr = ""
		return s.refuse(ev, err)
	}
	s.lastErr = ""
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearRefusal()
	ev.Previous, ev.BudgetKept = s.swap(cfg, hex.EncodeToString(s.lastHash[:]))
	ev.Config = cfg
	s.judge(&ev)
	return ev, true, nil
}

// recovered reports whether h, the content just read, is the config in
// use's (ok); if so it ends the refusal in force, if any (the file went
// missing, or was broken, and came back as it was): nothing is swapped,
// and OnReload hears of it (report) with Previous the config in use. The
// caller holds reloading.
func (s *Source) recovered(ev SourceEvent, h [sha256.Size]byte) (_ SourceEvent, report, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.loaded.Load(); l == nil || l.hash != hex.EncodeToString(h[:]) {
		return ev, false, false
	}
	s.lastErr = ""
	if !s.clearRefusal() {
		return ev, false, true
	}
	ev.Config = s.cur.Load()
	ev.Previous, ev.BudgetKept = ev.Config, true
	return ev, true, true
}

// clearRefusal forgets the refusal in force, keeping the count, and
// reports whether there was one. The caller holds mu.
func (s *Source) clearRefusal() bool {
	r := s.refused.Load()
	if r == nil || r.ev.Err == nil {
		return false
	}
	s.refused.Store(&refusal{n: r.n})
	return true
}

// refusal is what Refused returns; claimed says ClaimRefused gave it.
type refusal struct {
	n       uint64
	ev      SourceEvent
	claimed atomic.Bool
}

// ClaimRefused is Refused for a reporter that many readers of the Source
// share: ok is true for one caller only per refusal, the first to claim
// it, so that it is said once in the process however many connections
// follow the Source. The interceptors log each refusal this way through
// slog.Default() when they have no logger of their own.
func (s *Source) ClaimRefused() (ev SourceEvent, ok bool) {
	if s == nil {
		return SourceEvent{}, false
	}
	r := s.refused.Load()
	if r == nil || r.ev.Err == nil || r.claimed.Load() || r.claimed.Swap(true) {
		return SourceEvent{}, false
	}
	return r.ev, true
}

// Refused returns the reload the Source last refused (a file that could not
// be read or parsed; the last good config stays) while that file is still
// the latest, and n, the number of refusals so far: it changes with each
// new one, so a reader that remembers it can report each once. After a
// reload that succeeds, or that finds the file back to the content of the
// config in use, ev is zero until the next refusal; each new refusal is
// counted and reported, a file that goes missing twice included. The interceptors
// log each refusal through interceptor.WithLogger this way, on the next
// call, at error level (without a logger, through slog.Default(), once:
// ClaimRefused); OnReload hears of it at once.
func (s *Source) Refused() (n uint64, ev SourceEvent) {
	if s == nil {
		return 0, SourceEvent{}
	}
	if r := s.refused.Load(); r != nil {
		return r.n, r.ev
	}
	return 0, SourceEvent{}
}

// refuse reports err once: the same error again (a file still missing) is
// not reported on every poll. The caller holds reloading.
func (s *Source) refuse(ev SourceEvent, err error) (SourceEvent, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev.Config, ev.Err = s.cur.Load(), err
	if err.Error() == s.lastErr {
		return ev, false, err
	}
	s.lastErr = err.Error()
	var n uint64
	if r := s.refused.Load(); r != nil {
		n = r.n
	}
	s.refused.Store(&refusal{n: n + 1, ev: ev})
	return ev, true, err
}

// swap publishes cfg, whose content's hash is hash ("" for Update), and
// says whether its budget settings are the previous config's. The caller
// holds mu.
func (s *Source) swap(cfg *Config, hash string) (prev *Config, kept bool) {
	prev = s.cur.Swap(cfg)
	var gen uint64
	if l := s.loaded.Load(); l != nil {
		gen = l.generation
	}
	s.loaded.Store(&loaded{generation: gen + 1, hash: hash})
	return prev, prev != nil && prev.budgetSettings == cfg.budgetSettings
}

// loaded is what Loaded returns.
type loaded struct {
	generation uint64
	hash       string
}

// Loaded returns the generation of the config in use (1 for the first one,
// one more at each change a reload or Update made; a refused reload
// changes nothing) and, for a file, the SHA-256 of the content it came
// from, in hex ("" for a config given to NewSource or Update). Read beside
// Refused, it says which config is in force and whether the file on disk
// is it.
func (s *Source) Loaded() (generation uint64, hash string) {
	if s == nil {
		return 0, ""
	}
	l := s.loaded.Load()
	if l == nil {
		return 0, ""
	}
	return l.generation, l.hash
}

// Update swaps cfg in, as a reload of a file would; OnReload hears of it.
// It is meant for a Source made by NewSource. A nil cfg is refused.
func (s *Source) Update(cfg *Config) error {
	if cfg == nil {
		return errors.New("policy: Source.Update: nil Config")
	}
	s.mu.Lock()
	ev := SourceEvent{Path: s.path, Config: cfg}
	ev.Previous, ev.BudgetKept = s.swap(cfg, "")
	s.judge(&ev)
	s.mu.Unlock()
	if s.opts.onReload != nil {
		s.opts.onReload(ev)
	}
	return nil
}

// Close stops the polling goroutine and waits for it to end, which is at
// most the end of a reload under way: a reload reads only regular files,
// so none waits on a pipe's writer. The Source still answers Config
// afterwards. Close may be called more than once, but not
// from an OnReload callback (it would wait for itself).
func (s *Source) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
	return nil
}
