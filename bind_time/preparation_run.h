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

// A site met a shape it has no kernel for, on this thread, since the last take_unprepared_shape().
void note_unprepared_shape();
bool take_unprepared_shape();

} // namespace lightweight_dispatch
