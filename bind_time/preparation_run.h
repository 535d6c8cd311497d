// Which run a site's kernel is called from, per thread: the caller's, or a preparation run (background_preparation.h)
// that prepares kernels unseen. Read by every re-bound kernel (sites, folded calls) and set by the preparer, so it
// sits below both.
#pragma once

#include <cstdint>

namespace lightweight_dispatch {

// On the thread of a preparation run: sites prepare the shapes they meet, and their calls are not counted (the
// caller never sees this run). Elsewhere, with background preparation, a site only marks the call.
class PreparationRunScope {
 public:
  PreparationRunScope();
  ~PreparationRunScope();
  PreparationRunScope(const PreparationRunScope&) = delete;
  PreparationRunScope& operator=(const PreparationRunScope&) = delete;
};
bool in_preparation_run();

// On the thread of a comparison run (model_check.h): the stage runs the model once more on a copy of a caller's
// inputs to time it with and without the compiled kernels. Its calls are not counted and it prepares nothing.
class ComparisonRunScope {
 public:
  // `compiled_kernels`: whether the sites may run their compiled kernels in this run.
  explicit ComparisonRunScope(bool compiled_kernels);
  ~ComparisonRunScope();
  ComparisonRunScope(const ComparisonRunScope&) = delete;
  ComparisonRunScope& operator=(const ComparisonRunScope&) = delete;
};
bool in_comparison_run();
// A call made by the caller's run (neither a preparation run nor a comparison run): the one the counters count.
bool in_callers_run();

// Whether the sites may run their compiled kernels in the run on this thread: set by Stage::serve for each of a
// caller's runs (the model check's verdict for its inputs), by a comparison run for itself; true where nothing set
// it. Where false, every site runs its generated kernels, as a site whose every race was lost.
void set_compiled_kernels_allowed(bool allowed);
bool compiled_kernels_allowed();

// What the run on this thread did that the model check needs to know, since the last take_run_activity(): how
// many calls ran a compiled kernel, and whether any kernel decided something (compiled or checked a kernel, ran
// or deferred a race, timed a layout) — a run that decided nothing is one the next runs repeat.
struct RunActivity {
  int64_t compiled_calls = 0;
  bool decided = false;
};
void note_compiled_call();
void note_stage_decision();
RunActivity take_run_activity();

// How many preparation runs are in flight now in this process, any model's: counted from the moment one is
// started (before its thread runs) until it has finished.
void note_preparation_run_started();
void note_preparation_run_finished();
int preparation_runs_in_flight();

// Whether the caller's run on this thread was given inputs in the stock layout (no channels_last 4-d tensor):
// then the stock kernels return contiguous maps, and a kernel fed a channels_last site result gives its own result
// back contiguous. Set by Stage::serve for each run, and by a background preparation run from the inputs it
// repeats; true where nothing set it.
void set_run_inputs_stock_layout(bool stock);
bool run_inputs_stock_layout();

// Whether the caller's run on this thread is followed by a background preparation run when it meets a shape not
// prepared yet (note_unprepared_shape): then a kernel may leave what it would time or check on such a call to that
// run, and run as the stock kernels would. Set by Stage::serve for each run; false where nothing set it.
void set_preparation_run_follows(bool follows);
bool preparation_run_follows();

// A site met a shape it has no kernel for, on this thread, since the last take_unprepared_shape().
void note_unprepared_shape();
bool take_unprepared_shape();

} // namespace lightweight_dispatch
