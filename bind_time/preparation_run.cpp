#include <bind_time/preparation_run.h>

namespace lightweight_dispatch {

namespace {

thread_local bool preparing = false;
thread_local bool unprepared_shape_met = false;

} // namespace

PreparationRunScope::PreparationRunScope() {
  preparing = true;
}

PreparationRunScope::~PreparationRunScope() {
  preparing = false;
}

bool in_preparation_run() {
  return preparing;
}

void note_unprepared_shape() {
  unprepared_shape_met = true;
}

bool take_unprepared_shape() {
  const bool met = unprepared_shape_met;
  unprepared_shape_met = false;
  return met;
}

} // namespace lightweight_dispatch
