package main

import (
	"bufio"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is the process's peak resident set size (VmHWM), in bytes; 0
// where /proc is missing.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// heapNames are the runtime/metrics the sampler reads: the live heap as of
// the last GC, and the bytes of heap objects (live or not yet collected).
var heapNames = []string{"/gc/heap/live:bytes", "/memory/classes/heap/objects:bytes"}

// heapNow returns the live heap (as of the last GC) and the heap in use.
func heapNow() (live, inUse uint64) {
	s := []metrics.Sample{{Name: heapNames[0]}, {Name: heapNames[1]}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// baselineHeap collects garbage and returns the live heap.
func baselineHeap() uint64 {
	runtime.GC()
	live, _ := heapNow()
	return live
}

// heapSampler records the peak live heap and the peak heap in use while it
// runs.
type heapSampler struct {
	mu        sync.Mutex
	peakLive  uint64
	peakInUse uint64
	stop      chan struct{}
	done      chan struct{}
}

func startHeapSampler(every time.Duration) *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			h.sample()
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) sample() {
	live, inUse := heapNow()
	h.mu.Lock()
	h.peakLive, h.peakInUse = max(h.peakLive, live), max(h.peakInUse, inUse)
	h.mu.Unlock()
}

// Stop ends the sampling and returns the peaks.
func (h *heapSampler) Stop() (peakLive, peakInUse uint64) {
	close(h.stop)
	<-h.done
	h.sample()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peakLive, h.peakInUse
}

// percentile returns the p-th percentile (0..100) of sorted ds, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
