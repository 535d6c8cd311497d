// Faulting in, on a second core, the heap pages a load and the first run are about to write.
//
// In a fresh process every page the heap hands out for the first time costs its writer a page fault (the
// kernel maps a zeroed page): the loader's copies of the model's tensors, then the first run's activations and
// oneDNN's buffers. EfficientNet-B0 frozen wrote ~3,600 fresh pages in its first run, 15-20 ms of a 50-60 ms run
// on this project's VM. While a model loads, a helper thread faults in the main heap's pages above the last one
// the process had touched, following the program break up as the heap grows, with MADV_POPULATE_WRITE (Linux
// 5.14): the pages are mapped writable and their contents left alone, so malloc's callers may be writing to them
// at the same time. The load and the first run then find them ready. It costs resident memory the process would
// not have touched yet: at most the budget, and never above the break (the heap's pad, 64 MB, above what malloc
// handed out); nothing where it cannot apply: other C libraries, older kernels, and loads made on a thread other
// than the main one (their allocations come from that thread's own arena, not the main heap).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lightweight_dispatch {

// Whether the calling thread's allocations come from the main heap: glibc on Linux, on the process's main thread.
bool allocates_from_main_heap();

// Used by one thread (the helper), step by step; populated_bytes() may be read from any.
class HeapPrefault {
 public:
  // `budget_bytes`: how much of the heap above the pages in use (when the first step looks) to fault in at most.
  explicit HeapPrefault(size_t budget_bytes) : budget_bytes_(budget_bytes) {}

  enum class Step {
    Faulted,  // up to 1 MB more faulted in
    CaughtUp, // nothing above the heap's break to fault in now: step again once the heap has grown
    Done,     // the budget is spent, or the system cannot populate pages ahead (not glibc, Linux before 5.14)
  };
  Step step();

  size_t populated_bytes() const {
    return populated_bytes_.load(std::memory_order_relaxed);
  }

 private:
  size_t budget_bytes_;
  uintptr_t populated_to_ = 0;   // pages below are faulted in (by us, or in use already)
  uintptr_t populate_below_ = 0; // where the budget ends; 0 before the first step
  bool done_ = false;
  std::atomic<size_t> populated_bytes_{0};
};

// The budget for a model file of `file_bytes`: its size (the loader copies every tensor out of it) and 32 MB for
// the first run (EfficientNet-B0's wrote 14 MB of fresh pages).
size_t heap_prefault_budget(size_t file_bytes);

} // namespace lightweight_dispatch
