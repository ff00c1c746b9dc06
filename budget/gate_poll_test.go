package budget

import "time"

// Poll is what Waiter.Poll was before the grant loop, for the tests
// written against it: the grant loop at the gate's now, then w's verdict,
// taken, if it has one; else when the loop runs again (zero: on news).
func (w *Waiter) Poll() (Admission, time.Time, error) {
	next := w.g.Tick()
	select {
	case <-w.ready:
		a, err := w.Take()
		if a == AdmitNone && err == nil {
			return AdmitNone, w.g.Tick(), nil
		}
		return a, time.Time{}, err
	default:
		return AdmitNone, next, nil
	}
}

// err is the error that ended w's wait, or nil.
func (w *Waiter) err() error {
	w.g.mu.Lock()
	defer w.g.mu.Unlock()
	return w.end
}
