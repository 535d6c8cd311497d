// Which run a site's kernel is called from, per thread: the caller's, or a preparation run (background_preparation.h)
// that prepares kernels unseen. Read by every re-bound kernel (sites, folded calls) and set by the preparer, so it
// sits below both.
#pragma once

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
