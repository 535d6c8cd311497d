// --profile-ops: how often each operator runs and how long it takes, from the interpreter's
// RecordFunction events (both loops emit one per operator call, in the lite-interpreter scope).
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// One operator's calls and time over the profiled runs. The interpreter names operators without
// their overload ("aten::add" for aten::add.Tensor and aten::add.Scalar alike).
struct OpTiming {
  std::string op;
  int64_t calls = 0;
  double total_ms = 0.0;
};

// While alive, times every operator call the interpreter makes on any thread (a global callback,
// so --parallel runs would be counted too: profile single-threaded runs only). One at a time.
class OpProfiler {
 public:
  OpProfiler();
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Every operator seen so far, the most time first (ties: by name).
  std::vector<OpTiming> timings() const;

 private:
  at::CallbackHandle handle_;
};

} // namespace lightweight_dispatch
