// Preparing the bind-time stage's kernels off the calling thread (LoadOptions::preparation = Background).
//
// A site's kernel is compiled for an input shape, so it can only be made once a run shows the shapes. Made on
// the calling thread, that is the first run's cost (MobileNetV2: ~120 ms of oneDNN compilation and checks).
// In the background instead: a call that reaches a site with a shape it has no kernel for runs the site's
// generated kernels and marks the call; when the call returns, the model is run once more on a thread of its own,
// on a deep copy of the call's inputs, and that run prepares every site it reaches as a first call would
// (compile, check against the generated kernels, race them), unseen by the caller. Calls made after a
// site's kernel is ready run it. Until then, results are the generated kernels' (the stock kernels', bit for
// bit); after, the compiled kernels' (within 1e-5 of them, as checked).
#pragma once

#include <lightweight_dispatch/bind_time_report.h>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/mobile/module.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lightweight_dispatch {

// Why running `module` once more, unseen, could be seen (and so its kernels are prepared on first calls
// instead), or "" if it cannot: a function that reads or writes the module's attributes (state a run may
// change), warns (the WARN instruction), or calls an operator that is not deterministic (operator_facts.h: it
// draws random numbers, so a second run would move the generator the caller's runs draw from) or acts outside
// its results (prim::Print, aten::warn, aten::manual_seed). `schema_of` gives operators' schemas (null if
// unknown: then it could be seen). Raising does not show: the run repeats, on a copy of its inputs, a caller's
// run that returned, and what it raises goes to BackgroundPreparationStatus::error, never to a caller.
std::string why_a_preparation_run_would_show(
    const torch::jit::mobile::Module& module, const std::function<const c10::FunctionSchema*(const std::string&)>& schema_of);

// At most one preparation run at a time, each on a new thread; the destructor waits for it.
class BackgroundPreparer {
 public:
  // Runs `method` of the model on `inputs` (already a copy), under the caller's conditions (inference mode).
  using MethodRun = std::function<void(const std::string& method, std::vector<c10::IValue> inputs)>;

  explicit BackgroundPreparer(MethodRun run);
  ~BackgroundPreparer();
  BackgroundPreparer(const BackgroundPreparer&) = delete;
  BackgroundPreparer& operator=(const BackgroundPreparer&) = delete;

  // Starts a preparation run of `method` on a deep copy of `inputs`, unless one runs already (the shapes it
  // leaves unprepared mark a later call, which starts another).
  void start(const std::string& method, const std::vector<c10::IValue>& inputs);
  // Returns once no preparation run is running (at the cost of one atomic load when none is).
  void wait() const;
  BackgroundPreparationStatus status() const;

 private:
  void finish(double ms, std::string error);

  MethodRun run_;
  mutable std::mutex mutex_;
  mutable std::condition_variable idle_;
  std::thread worker_;
  BackgroundPreparationStatus status_;
  std::atomic<bool> running_{false}; // status_.running, read without the lock by wait()
};

} // namespace lightweight_dispatch
