// The model check: the stage's last word on speed, taken on whole runs of the caller's model.
//
// Each compiled kernel was raced alone against the generated kernels it replaces (race.h), and a race can pass a
// kernel that costs more inside the model than alone: DistilBERT's query/key/value linears on an AVX2 machine tie
// their races and yet make a run ~4% slower when all 18 run compiled (the next operators find other data in the
// caches, and one race's verdict stands for every site of its problem). So once a caller's runs on some inputs
// have settled (a run decided nothing: no site compiled, checked or raced, no layout was timed) and ran at least
// one compiled kernel, the stage runs the model a few more times on copies of those inputs, unseen by the caller,
// alternating runs with the compiled kernels and runs with every site on its generated kernels in the stock
// layouts, and keeps the compiled kernels for runs on inputs of that kind only where the runs with them
// were faster: the median of the pairs' ratios below 1 / kModelCheckMargin. Otherwise every later run on such
// inputs runs the sites' generated kernels in the stock layouts, as without the stage (a max_pool2d whose layout
// was not timed for a shape pools it as the stock kernel does in the check's runs): the sites' results are then
// the stock kernels' bit for bit.
//
// Each side runs once untimed first (a kernel's first call at a layout it has not met yet JITs its primitive).
// The extra runs are made on the caller's thread, right after the run that settled, so they are timed as the
// caller's runs are, and only while no other run of the model and no preparation run is in flight. They are made
// only where a second run cannot be seen (background_preparation.h: why_a_preparation_run_would_show), on deep
// copies of the inputs; a comparison run that does not repeat the settled run (it decides something, or runs
// another number of compiled calls) ends the check with the compiled kernels kept, as raced.
#pragma once

#include <bind_time/preparation_run.h>
#include <lightweight_dispatch/bind_time_report.h>

#include <ATen/core/ivalue.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// At least two pairs of runs, at most five; two when every pair has one side this much faster (race.h's 1.3).
constexpr int kModelCheckMinPairs = 2;
constexpr int kModelCheckMaxPairs = 5;
constexpr double kModelCheckClearly = 1.3;
// The compiled kernels stay only if the runs with them are this much faster: a near tie goes to the generated
// kernels (what --no-specialize runs).
constexpr double kModelCheckMargin = 1.02;

// One pair of timed runs of the model on the same inputs.
struct TimedPair {
  double with_compiled_ms = 0;
  double without_compiled_ms = 0;
};

// What the pairs so far say.
struct PairsVerdict {
  bool settled = false;     // no more pairs needed
  bool keep_compiled = false;
  double with_compiled_ms = 0;    // medians
  double without_compiled_ms = 0;
  double median_ratio = 0;        // of with / without, pair by pair
};
PairsVerdict judge_pairs(const std::vector<TimedPair>& pairs);

// The kind of inputs a verdict holds for: the method and, for every input (through lists, tuples and dicts), a
// tensor's dtype, sizes and layout, an integer's, bool's or string's value (any may choose a shape or a branch),
// and a floating-point number only as "float" (a scale or a threshold, which a caller may change every call).
// "forward(Float[1, 3, 224, 224])".
std::string inputs_kind(const std::string& method, const std::vector<c10::IValue>& inputs);

class ModelCheck {
 public:
  // Runs `method` on `inputs` as a caller's run (through the runtime's interpreter, nothing more) with the
  // stage's per-run state set; returns the run's activity (preparation_run.h) or throws what the run threw.
  using ComparisonRun = std::function<RunActivity(const std::string& method, std::vector<c10::IValue> inputs,
      bool compiled_kernels)>;

  // `not_run_because`: why the model is never checked ("" if it may be).
  explicit ModelCheck(std::string not_run_because);
  // Whether runs are checked at all.
  bool runs() const {
    return not_run_because_.empty();
  }

  // Whether a caller's run on inputs of `kind` may run the compiled kernels, and whether it should keep a copy
  // of its inputs for a check after it (no verdict yet for that kind).
  struct Plan {
    bool compiled_kernels = true;
    bool keep_inputs = false;
  };
  Plan plan(const std::string& kind) const;

  // After a caller's run on inputs of `kind`, whose copy `inputs` is (kept before the run), and that did
  // `activity`: checks the model now if that run settled and nothing else runs (`alone`); a settled run that ran
  // no compiled kernel leaves a verdict with nothing compared (later runs keep no copy of their inputs).
  void after_callers_run(const std::string& kind, const std::string& method, const std::vector<c10::IValue>& inputs,
      const RunActivity& activity, bool alone, const ComparisonRun& run);

  ModelCheckReport report() const;

 private:
  ModelCheckOfInputs compare(const std::string& kind, const std::string& method,
      const std::vector<c10::IValue>& inputs, int64_t compiled_calls, const ComparisonRun& run) const;

  std::string not_run_because_;
  mutable std::mutex mutex_; // the verdicts
  std::mutex checking_;      // one check at a time
  std::map<std::string, ModelCheckOfInputs> verdicts_;
};

// At most this many kinds of inputs are checked (as a site keeps at most 4 shapes); runs on others keep the
// compiled kernels as raced.
constexpr size_t kModelCheckMaxKinds = 4;

} // namespace lightweight_dispatch
