package sim

import "sync"

// runIndexed calls run(i) for every i in [0, n) on workers goroutines and
// returns the results in index order. Every run finishes before it returns;
// the error it reports is that of the lowest failing index, so a sweep fails
// the same way whatever the scheduling. Each run must draw from its own *Sim:
// the results then depend only on the index, never on which worker ran it.
func runIndexed[R any](workers, n int, run func(i int) (R, error)) ([]R, error) {
	res := make([]R, n)
	errs := make([]error, n)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				res[i], errs[i] = run(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}
