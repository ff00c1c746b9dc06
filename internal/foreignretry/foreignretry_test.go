package foreignretry

import (
	"testing"

	"google.golang.org/grpc"
)

type (
	maxOpts      struct{ max uint }
	intMaxOpts   struct{ max int }
	shapeWithMax struct {
		grpc.EmptyCallOption
		applyFunc func(*maxOpts)
	}
	shapeIntMax struct {
		grpc.EmptyCallOption
		applyFunc func(*intMaxOpts)
	}
	shapeTwoArgs struct {
		grpc.EmptyCallOption
		applyFunc func(*maxOpts, int)
	}
	shapeNoApply struct{ grpc.EmptyCallOption }
	shapeNotFunc struct {
		grpc.EmptyCallOption
		applyFunc int
	}
)

// TestForeignAttemptsShapes: Attempts reads the attempts of an
// option shaped as go-grpc-middleware's, and no value (0), without a
// panic, from any other shape.
func TestForeignAttemptsShapes(t *testing.T) {
	cases := []struct {
		name string
		opt  grpc.CallOption
		want int
	}{
		{"WithMax(3)", shapeWithMax{applyFunc: func(o *maxOpts) { o.max = 3 }}, 3},
		{"pointer, WithMax(3)", &shapeWithMax{applyFunc: func(o *maxOpts) { o.max = 3 }}, 3},
		{"Disable", shapeWithMax{applyFunc: func(o *maxOpts) { o.max = 0 }}, 1},
		{"another option", shapeWithMax{applyFunc: func(*maxOpts) {}}, 0},
		{"nil applyFunc", shapeWithMax{}, 0},
		{"nil pointer", (*shapeWithMax)(nil), 0},
		{"max not a uint", shapeIntMax{applyFunc: func(o *intMaxOpts) { o.max = 3 }}, 0},
		{"two arguments", shapeTwoArgs{applyFunc: func(o *maxOpts, _ int) { o.max = 3 }}, 0},
		{"no applyFunc", shapeNoApply{}, 0},
		{"applyFunc not a func", shapeNotFunc{applyFunc: 3}, 0},
		{"nil", nil, 0},
	}
	for _, tc := range cases {
		if got := Attempts(tc.opt); got != tc.want {
			t.Errorf("%s: Attempts = %d, want %d", tc.name, got, tc.want)
		}
	}
}
