package callmodel

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func TestScriptRoundTrip(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		for _, method := range []string{"Get", "ListItems", "Upload", "Chat"} {
			c := Random(seed, seed%2 == 0, method)
			got, err := ParseScript(c.Script.String())
			if err != nil || !slices.Equal(got, c.Script) {
				t.Fatalf("seed %d %s: ParseScript(%q) = %v, %v; want %v", seed, method, c.Script, got, err, c.Script)
			}
		}
	}
	for _, bad := range []string{"", "1,2,3", "1,2,3,4,x", "1,2,0,0,0;"} {
		if _, err := ParseScript(bad); err == nil {
			t.Errorf("ParseScript(%q) took it", bad)
		}
	}
}

func TestPick(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	step := func(hdr, end, msgs int, code codes.Code) Step {
		h := ms(hdr)
		if hdr < 0 {
			h = -1
		}
		return Step{Hdr: h, End: ms(end), Msgs: msgs, Code: code}
	}
	unopened := Step{Hdr: -1, Code: codes.Unavailable, Unopened: true}
	for _, tc := range []struct {
		name       string
		c          Case
		n          int
		margin     time.Duration
		lateHeader int // the pick with LateHeaders (0: the same)
	}{
		{
			name: "retry: the last failure",
			c:    Case{Method: "Get", Script: Script{step(-1, 5, 0, codes.Unavailable), unopened}},
			n:    2, margin: NoRace,
		},
		{
			name: "retry: a unary failure after headers ends the call, which Connect's cannot",
			c:    Case{Method: "Get", Script: Script{step(1, 5, 0, codes.Unavailable), step(-1, 5, 0, codes.OK)}},
			n:    1, margin: NoRace, lateHeader: 2,
		},
		{
			name: "retry: a server stream commits at its headers, Connect's at its first message",
			c:    Case{Method: "ListItems", Stream: true, Script: Script{step(1, 5, 0, codes.Unavailable), step(-1, 5, 0, codes.OK)}},
			n:    1, margin: NoRace, lateHeader: 2,
		},
		{
			name: "hedge: the first OK wins",
			c:    Case{Method: "Get", Hedge: true, Script: Script{step(-1, 40, 0, codes.OK), step(-1, 10, 0, codes.OK)}},
			// The hedge goes at 25 and ends at 35, 5 before the first.
			n: 2, margin: ms(5),
		},
		{
			name: "hedge: a fatal code ends the call",
			c:    Case{Method: "Get", Hedge: true, Script: Script{step(-1, 30, 0, codes.Internal), step(-1, 10, 0, codes.OK)}},
			n:    1, margin: ms(5),
		},
		{
			name: "hedge: a non-fatal failure sends the next at once",
			c:    Case{Method: "Get", Hedge: true, Script: Script{step(-1, 10, 0, codes.Unavailable), step(-1, 10, 0, codes.OK)}},
			// The first ends 15 before the timer; the second is the last.
			n: 2, margin: ms(15),
		},
		{
			name: "hedge: an end at the timer's instant is a tie",
			c:    Case{Method: "Get", Hedge: true, Script: Script{step(-1, 25, 0, codes.Unavailable), step(-1, 10, 0, codes.OK)}},
			n:    2, margin: 0,
		},
		{
			name: "hedge: a stream commits at its headers before another's OK",
			c:    Case{Method: "ListItems", Stream: true, Hedge: true, Script: Script{step(30, 50, 0, codes.Unavailable), step(-1, 8, 0, codes.OK)}},
			// Headers at 30, the hedge's OK at 33; with LateHeaders the
			// first has none before its end, and the hedge's OK wins.
			n: 1, margin: ms(3), lateHeader: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, margin := tc.c.Pick()
			if n != tc.n || margin != tc.margin {
				t.Errorf("Pick() = %d, %v; want %d, %v", n, margin, tc.n, tc.margin)
			}
			want := tc.n
			if tc.lateHeader != 0 {
				want = tc.lateHeader
			}
			tc.c.LateHeaders = true
			if n, _ := tc.c.Pick(); n != want {
				t.Errorf("with LateHeaders, Pick() = %d; want %d", n, want)
			}
		})
	}
}

func TestSeeds(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want []uint64
	}{
		{"", []uint64{1, 2, 3}},
		{"2", []uint64{1, 2}},
		{"5-7", []uint64{5, 6, 7}},
	} {
		got, err := Seeds(tc.env, 3)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Seeds(%q, 3) = %v, %v; want %v", tc.env, got, err, tc.want)
		}
	}
	for _, bad := range []string{"x", "7-5", "1-", "-3"} {
		if _, err := Seeds(bad, 3); err == nil {
			t.Errorf("Seeds(%q, 3) took it", bad)
		}
	}
}
