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
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace lightweight_dispatch {

// Whether the calling thread's allocations come from the main heap: glibc on Linux, on the process's main thread.
bool allocates_from_main_heap();

class HeapPrefault {
 public:
  // `budget_bytes`: how much of the heap above its in-use top (when run() starts) to fault in at most.
  explicit HeapPrefault(size_t budget_bytes) : budget_bytes_(budget_bytes) {}

  // On the helper thread: keeps the pages ahead faulted in until stop(). Returns at once where the system cannot
  // populate pages ahead (no MADV_POPULATE_WRITE, not glibc).
  void run();
  // From any thread: run() returns within one step (1 MB of pages).
  void stop();

  size_t populated_bytes() const {
    return populated_bytes_.load(std::memory_order_relaxed);
  }

 private:
  bool stopped() const;

  size_t budget_bytes_;
  std::atomic<size_t> populated_bytes_{0};
  mutable std::mutex mutex_;
  std::condition_variable woken_;
  bool stop_ = false;
};

// The budget for a model file of `file_bytes`: its size (the loader copies every tensor out of it) and 32 MB for
// the first run (EfficientNet-B0's wrote 14 MB of fresh pages).
size_t heap_prefault_budget(size_t file_bytes);

} // namespace lightweight_dispatch
