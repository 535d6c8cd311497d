// A second thread for a model's load, where one can start (without it the load goes on, only slower):
// - LibTorch's loader looks up every operator the bytecode names in the JIT operator registry, and the first
//   lookup in a process parses the schema of every operator registered with it (~28M instructions, 5-11 ms). The
//   lookup is the registry's own (under its lock), so the helper makes that first one while the loading thread
//   checks the file; the loader then finds the registry ready, or waits on its lock for the rest.
// - Then it faults in the heap's next pages (runtime/heap_prefault.h) ahead of the loader's copies of the
//   tensors and the first run's activations, until told to finish (as the first run starts: beside a run it
//   slows the run down).
// - It unmaps the checked model file when the loader is done with it: unmapping it on the loading thread while
//   the helper faulted pages in took 5-7 ms, against 0.8 alone.
#pragma once

#include <runtime/heap_prefault.h>
#include <runtime/model_file_check.h>

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <thread>

namespace lightweight_dispatch {

class LoadHelper {
 public:
  // `prefault_budget`: the most heap to fault in (0: none; the registry is warmed either way).
  explicit LoadHelper(size_t prefault_budget);
  LoadHelper(const LoadHelper&) = delete;
  LoadHelper& operator=(const LoadHelper&) = delete;
  ~LoadHelper();

  // Hands the checked file over for the helper to unmap between steps (now, where no thread started).
  void release(CheckedModelFile file);
  // Stops the helper and waits for it (at most one step: 1 MB of pages); returns the bytes of heap it faulted in.
  // Later calls return the same.
  size_t finish();

 private:
  void work();

  HeapPrefault prefault_;
  bool prefault_wanted_;
  std::mutex mutex_;
  std::condition_variable woken_;
  bool stop_ = false;
  std::optional<CheckedModelFile> to_release_;
  std::thread thread_;
};

} // namespace lightweight_dispatch
