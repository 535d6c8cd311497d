#include <bind_time/preparation_run.h>

#include <atomic>

namespace lightweight_dispatch {

namespace {

thread_local bool preparing = false;
thread_local bool unprepared_shape_met = false;
thread_local bool inputs_stock_layout = true;
thread_local bool preparation_follows = false;
thread_local bool comparing = false;
thread_local bool compiled_allowed = true;
thread_local RunActivity activity;
std::atomic<int> runs_in_flight{0};

} // namespace

PreparationRunScope::PreparationRunScope() {
  preparing = true;
}

PreparationRunScope::~PreparationRunScope() {
  preparing = false;
}

ComparisonRunScope::ComparisonRunScope(bool compiled_kernels) {
  comparing = true;
  compiled_allowed = compiled_kernels;
}

ComparisonRunScope::~ComparisonRunScope() {
  comparing = false;
  compiled_allowed = true;
}

bool in_comparison_run() {
  return comparing;
}

bool in_callers_run() {
  return !preparing && !comparing;
}

void set_compiled_kernels_allowed(bool allowed) {
  compiled_allowed = allowed;
}

bool compiled_kernels_allowed() {
  return compiled_allowed;
}

void note_compiled_call() {
  activity.compiled_calls += 1;
}

void note_stage_decision() {
  activity.decided = true;
}

RunActivity take_run_activity() {
  const RunActivity taken = activity;
  activity = RunActivity{};
  return taken;
}

void note_preparation_run_started() {
  runs_in_flight.fetch_add(1, std::memory_order_acq_rel);
}

void note_preparation_run_finished() {
  runs_in_flight.fetch_sub(1, std::memory_order_acq_rel);
}

int preparation_runs_in_flight() {
  return runs_in_flight.load(std::memory_order_acquire);
}

bool in_preparation_run() {
  return preparing;
}

void set_run_inputs_stock_layout(bool stock) {
  inputs_stock_layout = stock;
}

bool run_inputs_stock_layout() {
  return inputs_stock_layout;
}

void set_preparation_run_follows(bool follows) {
  preparation_follows = follows;
}

bool preparation_run_follows() {
  return preparation_follows && !preparing;
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
