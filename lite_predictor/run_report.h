// What one lite_predictor run found, printed for people or as JSON.
#pragma once

#include <lightweight_dispatch/runtime.h>
#include <lite_predictor/op_profile.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace lightweight_dispatch {

struct RunReport {
  std::string model;
  std::string dispatch; // "static" or "dynamic"
  std::string interpreter; // "lightweight" or "stock"
  std::string qengine; // the quantized engine packed weights were built with: "x86", "qnnpack", ...
  std::vector<OperatorUse> ops;
  bool specialize = false; // the bind-time stage ran
  std::vector<CallSite> call_sites;
  std::vector<SpecializedCallSite> specialized_sites;
  std::vector<FoldedCallSite> folded_calls;
  AttributeFreezingReport attribute_freezing;
  std::vector<LayoutCallSite> layout_calls;
  std::vector<InPlaceCallSite> in_place_calls;
  bool choose_quantized_engines = false; // --qengine auto
  std::vector<QuantizedEngineCallSite> quantized_engine_calls; // with it: the calls that may choose
  std::string input_source;
  std::optional<std::string> expected_source;
  std::optional<bool> outputs_match; // unset when there is nothing to compare with
  double max_abs_diff = 0.0;
  std::string mismatch;
  size_t num_outputs = 0;
  double load_ms = 0.0;
  LoadTimings load_timings; // load_ms, stage by stage
  double first_run_ms = 0.0;
  // Preparation::Background: its runs, and how long lite_predictor waited for them after the first run.
  BackgroundPreparationStatus background_preparation;
  ModelCheckReport model_check; // after the runs
  double kernels_waited_ms = 0.0;
  double median_ms = 0.0;
  double min_ms = 0.0;
  double page_faults_per_run = 0.0; // minor page faults per timed run (fresh mmap'd pages show up here)
  long first_run_page_faults = 0;   // minor page faults the calling thread took in the first run (not the helper's)
  bool default_malloc = false;
  HugePages huge_pages; // after the timed runs
  int iters = 0;
  int threads = 0;
  // --parallel K: K threads running the one module at once.
  int parallel_threads = 0;
  int parallel_runs = 0;
  double parallel_seconds = 0.0;
  bool parallel_outputs_identical = false;
  // --profile-ops: operator timings over profile_runs runs that took profile_ms in all.
  int profile_runs = 0;
  double profile_ms = 0.0;
  std::vector<OpTiming> op_profile;
};

void print_text(std::ostream& out, const RunReport& report);
void print_json(std::ostream& out, const RunReport& report);

// {"ops": [{"name": ..., "schema": ...}, ...]}: the operators a build has generated kernels for.
void print_op_list_json(std::ostream& out, c10::ArrayRef<GeneratedKernel> kernels);

} // namespace lightweight_dispatch
