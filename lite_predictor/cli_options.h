// lite_predictor's command line.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lightweight_dispatch {

enum class DispatchMode { Static, Dynamic };

// Which loop runs the bytecode: lite_predictor's own (BytecodeInterpreter) or LibTorch's stock one.
enum class InterpreterKind { Lightweight, Stock };

const char* interpreter_name(InterpreterKind kind);

struct Options {
  std::string model_path;
  std::optional<std::string> input_path;
  std::optional<std::string> expected_path;
  std::optional<std::string> save_outputs_path;
  double atol = 1e-5;
  double rtol = 1e-5;
  int iters = 10;
  int warmup = 1;
  int threads = 0; // 0: leave LibTorch's default
  std::optional<std::string> qengine; // unset: LibTorch's default quantized engine
  bool choose_quantized_engines = false; // --qengine auto: the stage picks an engine per quantized call
  DispatchMode dispatch = DispatchMode::Static;
  // Default: Lightweight with static dispatch, Stock with dynamic (the unmodified stock runtime).
  InterpreterKind interpreter = InterpreterKind::Lightweight;
  int parallel = 0; // > 0: also run from this many threads at once on the one loaded module
  bool profile_ops = false; // after the timed runs, --iters more with a per-operator timer
  bool in_process = false; // --no-crash-guard (or --in-process): no fault-signal handlers (debuggers, profilers)
  bool specialize = true; // the bind-time stage (static dispatch); --no-specialize turns it off
  bool prepare_on_first_call = false; // --prepare first-call: its kernels compile on the calling thread
  bool model_check = true; // --no-model-check turns the stage's model check off
  bool default_malloc = false; // leave glibc's mmap thresholds as they are (for comparison)
  bool heap_prefault = true; // --no-heap-prefault: no helper thread faulting in the heap while loading
  bool json = false;
  bool help = false;
  bool list_ops = false; // print the operators this build has generated kernels for, and exit
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv; throws UsageError with a message naming the bad flag or value.
Options parse_options(const std::vector<std::string>& args, bool static_dispatch_available);

std::string usage_text();

} // namespace lightweight_dispatch
