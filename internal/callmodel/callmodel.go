// Package callmodel is the model of what a caller sees of a call that
// stagger retries or hedges, shared by the model tests of the grpc-go and
// Connect front ends (it is test support: nothing but tests imports it).
//
// A schedule (Case) says how a scripted server answers each attempt of one
// call: when it sends its response headers and messages, and when and with
// which status it ends. Random draws schedules from a seed; Pick says which
// attempt's answer the caller must see, by gRFC A6 as package interceptor's
// doc states it: the first attempt that commits (its response headers
// arrive, or it ends OK), else the one whose end ended the call (a fatal
// code, or the last failure). Every observable the caller has (status,
// headers, trailers, messages, peer) must name that attempt and no other,
// and the call ends once (grpc.OnFinish runs once, with that status).
//
// Times are the schedule's own: the grpc-go test plays them on synctest's
// virtual clock, the Connect test scaled up in real time; Pick says how far
// apart the events that decided the call are, so that a test skips the
// schedules whose order its clock cannot promise.
package callmodel

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// Delay is the hedging delay of the model's hedging policy; Backoff the
// (fixed) pause between two attempts of its retry policy, which the model
// does not need (one attempt after another picks the same whatever the
// pauses).
const (
	Delay   = 25 * time.Millisecond
	Backoff = 10 * time.Millisecond
)

// Step is how the server answers one attempt, in times after it arrives:
// headers (x-attempt) at Hdr, with Msgs messages for a stream that sends
// several (Hdr < 0: none before the end), then at End its status with its
// trailer (x-attempt-trailer) and, failing, the message "attempt n".
type Step struct {
	Hdr, End time.Duration
	Msgs     int
	Code     codes.Code
	// Unopened: the attempt never leaves the client, failed with Code by an
	// interceptor below stagger as it starts.
	Unopened bool
}

// String is the step as ParseScript reads it: "hdr,end,msgs,code,unopened"
// in milliseconds (hdr -1: no headers before the end).
func (st Step) String() string {
	hdr := int(st.Hdr / time.Millisecond)
	if st.Hdr < 0 {
		hdr = -1
	}
	unopened := 0
	if st.Unopened {
		unopened = 1
	}
	return fmt.Sprintf("%d,%d,%d,%d,%d", hdr, st.End/time.Millisecond, st.Msgs, st.Code, unopened)
}

// Script is a call's steps, attempt 1 first.
type Script []Step

// String is the script as ParseScript reads it: the steps, separated by
// semicolons. Servers get it in a request header.
func (sc Script) String() string {
	parts := make([]string, len(sc))
	for i, st := range sc {
		parts[i] = st.String()
	}
	return strings.Join(parts, ";")
}

// ParseScript reads a script that Script.String wrote.
func ParseScript(s string) (Script, error) {
	var sc Script
	for _, p := range strings.Split(s, ";") {
		f := strings.Split(p, ",")
		if len(f) != 5 {
			return nil, fmt.Errorf("callmodel: step %q: want 5 numbers, got %d", p, len(f))
		}
		var n [5]int
		for i := range n {
			v, err := strconv.Atoi(f[i])
			if err != nil {
				return nil, fmt.Errorf("callmodel: step %q: %v", p, err)
			}
			n[i] = v
		}
		hdr := time.Duration(n[0]) * time.Millisecond
		if n[0] < 0 {
			hdr = -1
		}
		sc = append(sc, Step{Hdr: hdr, End: time.Duration(n[1]) * time.Millisecond, Msgs: n[2], Code: codes.Code(n[3]), Unopened: n[4] == 1})
	}
	return sc, nil
}

// Mode is one kind of call a model test plays: a method of the test
// service under a retry or a hedging policy.
type Mode struct {
	// Name names the mode's subtest: the call's kind, then the policy.
	Name   string
	Hedge  bool
	Method string
}

// Modes are the modes both front ends' model tests play: every kind of
// call, retried and hedged.
var Modes = []Mode{
	{"unary/retry", false, "Get"},
	{"unary/hedge", true, "Get"},
	{"server-stream/retry", false, "ListItems"},
	{"server-stream/hedge", true, "ListItems"},
	{"client-stream/retry", false, "Upload"},
	{"client-stream/hedge", true, "Upload"},
	{"bidi/retry", false, "Chat"},
	{"bidi/hedge", true, "Chat"},
}

// Case is one schedule: the script, the policy and the call's kind.
type Case struct {
	Script Script
	Hedge  bool
	// Stream: a streaming call; ClientStream: its response is one message
	// (Upload), else as many as the script says (ListItems, Chat).
	Stream, ClientStream bool
	// Method is the test service's method: Get, ListItems, Upload or Chat.
	Method string
	// LateHeaders: the server's response headers leave with its first
	// message or its end, never alone (connect-go's handlers); otherwise
	// they leave at the step's Hdr (grpc-go's SendHeader).
	LateHeaders bool
}

// Random draws a schedule for method: two to four attempts (all the policy
// allows), each with its own times and end. Codes: OK, UNAVAILABLE
// (retryable, non-fatal) and INTERNAL (fatal). The same seed, hedge and
// method give the same schedule, for every front end.
func Random(seed uint64, hedge bool, method string) Case {
	r := rand.New(rand.NewPCG(seed, 57))
	n := 2 + r.IntN(3)
	stream := method != "Get"
	c := Case{Hedge: hedge, Stream: stream, ClientStream: method == "Upload", Method: method}
	for i := 0; i < n; i++ {
		st := Step{Hdr: -1, Code: []codes.Code{codes.OK, codes.Unavailable, codes.Unavailable, codes.Internal}[r.IntN(4)]}
		st.End = time.Duration(1+r.IntN(60)) * time.Millisecond
		if st.Code != codes.OK && r.IntN(6) == 0 {
			st.Unopened, st.End = true, 0
		} else if r.IntN(3) == 0 {
			st.Hdr = time.Duration(r.IntN(int(st.End/time.Millisecond))) * time.Millisecond
			if stream && !c.ClientStream {
				st.Msgs = r.IntN(3)
			}
		}
		c.Script = append(c.Script, st)
	}
	return c
}

// OneReply says the call's response is one message: it comes with headers
// when the attempt succeeds.
func (c Case) OneReply() bool { return !c.Stream || c.ClientStream }

// early reports whether attempt st's response headers reach the caller
// before its end, at st.Hdr.
func (c Case) early(st Step) bool {
	if st.Unopened || st.Hdr < 0 {
		return false
	}
	return !c.LateHeaders || c.Stream && !c.ClientStream && st.Msgs > 0
}

// HasHeaders says whether the caller sees attempt st's response headers as
// grpc-go shows them (a stream's Header, grpc.Header): sent before its end,
// or with the one reply of a success.
func (c Case) HasHeaders(st Step) bool {
	return !st.Unopened && (c.early(st) || c.OneReply() && st.Code == codes.OK)
}

// HasPeer says whether the caller's grpc.Peer holder is filled when
// attempt st is the one it sees: only an attempt that opened has a peer.
func (c Case) HasPeer(st Step) bool { return !st.Unopened }

// Replies is how many messages the caller receives from attempt st when it
// is the one the caller sees.
func (c Case) Replies(st Step) int {
	switch {
	case c.OneReply():
		if st.Code == codes.OK {
			return 1
		}
		return 0
	case st.Hdr >= 0:
		return st.Msgs
	}
	return 0
}

// NoRace is the margin Pick returns when no two events of the schedule
// race (one attempt after another).
const NoRace = time.Duration(math.MaxInt64)

// Pick is the model: the attempt n (1: the first) whose answer the caller
// sees, and margin, the least time between two events of the schedule
// whose order decided it (the hedging timer, or events of two attempts):
// 0 when two meet at one instant, whose order is not the model's to decide.
// A test skips a schedule whose margin its clock cannot keep.
func (c Case) Pick() (n int, margin time.Duration) {
	if !c.Hedge {
		// One attempt after another: the first that commits, an OK or a
		// fatal code ends the call, else the last failure.
		for i, st := range c.Script {
			if c.early(st) || st.Code != codes.Unavailable || i == len(c.Script)-1 {
				return i + 1, NoRace
			}
		}
	}
	type event struct {
		at     time.Duration
		n      int
		header bool
	}
	var events []event
	start := func(n int, at time.Duration) {
		st := c.Script[n-1]
		if c.Stream && c.early(st) {
			events = append(events, event{at: at + st.Hdr, n: n, header: true})
		}
		events = append(events, event{at: at + st.End, n: n})
	}
	margin = NoRace
	race := func(a, b time.Duration) {
		if d := b - a; d < margin {
			margin = d
		}
	}
	max := len(c.Script)
	sent, last := 1, 0
	start(1, 0)
	timer := Delay
	live := map[int]bool{1: true}
	for {
		slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
		// next is the first event of a live attempt; other the first of
		// another live attempt, which races it.
		var next, other event
		found, rival := false, false
		for _, e := range events {
			if !live[e.n] {
				continue
			}
			if !found {
				next, found = e, true
			} else if e.n != next.n {
				other, rival = e, true
				break
			}
		}
		if sent < max && (!found || timer < next.at) {
			if found {
				race(timer, next.at)
			}
			sent++
			live[sent] = true
			start(sent, timer)
			timer += Delay
			continue
		}
		if !found {
			return last, margin
		}
		if rival {
			race(next.at, other.at)
		}
		if sent < max {
			race(next.at, timer)
		}
		events = slices.DeleteFunc(events, func(e event) bool { return e == next })
		st := c.Script[next.n-1]
		switch {
		case next.header:
			// A stream commits at headers.
			return next.n, margin
		case st.Code == codes.OK, st.Code != codes.Unavailable, !c.Stream && c.early(st):
			// An OK wins; a fatal code, or a unary failure after headers,
			// ends the call.
			return next.n, margin
		}
		delete(live, next.n)
		last = next.n
		if sent < max {
			// A non-fatal failure sends the next hedge at once.
			sent++
			live[sent] = true
			start(sent, next.at)
			timer = next.at + Delay
		}
		if len(live) == 0 {
			return last, margin
		}
	}
}

// Seeds are the seeds a model test runs: 1 to n, or as env says (a
// variable's value; "" keeps n): "N" for 1 to N, "A-B" for A to B.
func Seeds(env string, n uint64) ([]uint64, error) {
	from := uint64(1)
	if env != "" {
		lo, hi, ok := strings.Cut(env, "-")
		a, errA := strconv.ParseUint(lo, 10, 64)
		b, errB := strconv.ParseUint(hi, 10, 64)
		switch {
		case !ok && errA == nil:
			n = a
		case ok && errA == nil && errB == nil && a <= b:
			from, n = a, b-a+1
		default:
			return nil, errors.New("callmodel: seeds " + strconv.Quote(env) + ": want N or A-B")
		}
	}
	s := make([]uint64, n)
	for i := range s {
		s[i] = from + uint64(i)
	}
	return s, nil
}

// Observed is one observable of a caller under one key (x-attempt for
// response headers, x-attempt-trailer for trailers): the attempt tags it
// carries and those the model wants there.
type Observed struct {
	Name, Key string
	Got, Want []string
}

// Check says how what the caller saw differs from attempt n's answer: each
// observable's tags, and replies, the attempt tag of every message the
// caller received; problems are what the front end found already (its
// status). It returns nil when nothing differs.
func (c Case) Check(n int, problems []string, obs []Observed, replies []int32) error {
	for _, o := range obs {
		if !slices.Equal(o.Got, o.Want) {
			problems = append(problems, fmt.Sprintf("%s %s = %q, want %q", o.Name, o.Key, o.Got, o.Want))
		}
	}
	want := c.Replies(c.Script[n-1])
	if len(replies) != want || slices.ContainsFunc(replies, func(a int32) bool { return a != int32(n) }) {
		problems = append(problems, fmt.Sprintf("messages from attempts %v, want %d from attempt %d", replies, want, n))
	}
	if problems == nil {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}
