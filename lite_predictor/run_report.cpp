#include <lite_predictor/run_report.h>

#include <iomanip>
#include <map>
#include <sstream>

namespace lightweight_dispatch {

namespace {

std::string json_string(const std::string& text) {
  std::ostringstream out;
  out << '"';
  for (const unsigned char c : text) {
    switch (c) {
      case '"':
        out << "\\\"";
        break;
      case '\\':
        out << "\\\\";
        break;
      case '\n':
        out << "\\n";
        break;
      case '\t':
        out << "\\t";
        break;
      default:
        if (c < 0x20) {
          out << "\\u" << std::hex << std::setw(4) << std::setfill('0') << static_cast<int>(c) << std::dec;
        } else {
          out << c;
        }
    }
  }
  out << '"';
  return out.str();
}

std::map<std::string, int> count_by_path(const std::vector<OperatorUse>& ops) {
  std::map<std::string, int> counts;
  for (const auto& op : ops) {
    counts[op.path] += 1;
  }
  return counts;
}

// "12" for a whole number of calls per run, "12.5" otherwise (an op inside a data-dependent loop).
std::string calls_per_run(const OpTiming& timing, int runs) {
  std::ostringstream out;
  if (timing.calls % runs == 0) {
    out << timing.calls / runs;
  } else {
    out << std::fixed << std::setprecision(1) << static_cast<double>(timing.calls) / runs;
  }
  return out.str();
}

void print_profile_text(std::ostream& out, const RunReport& report) {
  const double ms_per_run = report.profile_ms / report.profile_runs;
  out << "profile:   " << report.op_profile.size() << " operator(s) over " << report.profile_runs
      << " runs with a per-call timer, " << ms_per_run << " ms per run; per run, most time first:\n";
  out << "  " << std::right << std::setw(9) << "calls" << std::setw(11) << "ms" << std::setw(8) << "% run"
      << std::setw(12) << "us/call" << "  operator\n";
  for (const OpTiming& timing : report.op_profile) {
    const double op_ms_per_run = timing.total_ms / report.profile_runs;
    out << "  " << std::setw(9) << calls_per_run(timing, report.profile_runs) << std::setw(11) << op_ms_per_run
        << std::setw(8) << std::setprecision(1) << 100.0 * op_ms_per_run / ms_per_run << std::setprecision(3)
        << std::setw(12) << 1e3 * timing.total_ms / timing.calls << "  " << timing.op << "\n";
  }
  out << std::left;
}

void print_profile_json(std::ostream& out, const RunReport& report) {
  out << ", \"op_profile\": {\"runs\": " << report.profile_runs
      << ", \"ms_per_run\": " << report.profile_ms / report.profile_runs << ", \"ops\": [";
  for (size_t i = 0; i < report.op_profile.size(); ++i) {
    const OpTiming& timing = report.op_profile[i];
    out << (i ? ", " : "") << "{\"op\": " << json_string(timing.op) << ", \"calls\": " << timing.calls
        << ", \"ms_per_run\": " << timing.total_ms / report.profile_runs
        << ", \"us_per_call\": " << 1e3 * timing.total_ms / timing.calls << "}";
  }
  out << "]}";
}

} // namespace

namespace {

std::string json_string_list(const std::vector<std::string>& items) {
  std::string list = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    list += (i ? ", " : "") + json_string(items[i]);
  }
  return list + "]";
}

// The calls the stage folded, in one line.
void print_folded_text(std::ostream& out, const RunReport& report) {
  if (report.folded_calls.empty()) {
    return;
  }
  int64_t computed = 0, reused = 0;
  for (const FoldedCallSite& call : report.folded_calls) {
    computed += call.computed;
    reused += call.reused;
  }
  out << "bind-time: " << report.folded_calls.size()
      << " call(s) folded (results from constants and input shapes only, remembered per input shape): "
      << computed << " computed, " << reused << " reused\n";
}

// What bind-time freezing did, in one line (nothing for a model with no attribute reads).
void print_freezing_text(std::ostream& out, const RunReport& report) {
  const AttributeFreezingReport& freezing = report.attribute_freezing;
  if (freezing.applied) {
    out << "bind-time: attributes frozen (no method can change them): " << freezing.attribute_reads
        << " attribute read(s) now constants, " << freezing.folded_batch_norms
        << " batch_norm call(s) folded into their conv2d (" << freezing.folded_weights << " folded weight(s), "
        << freezing.folded_in_place << " written over the weights loaded), "
        << freezing.constant_branches
        << " branch(es) on constants resolved, " << freezing.computed_calls << " call(s) on constants computed, "
        << freezing.removed_dropouts << " inference dropout(s) removed, "
        << freezing.removed_instructions << " instruction(s) fewer, in " << freezing.frozen_functions
        << " method(s)";
    if (freezing.shared_programs > 0) {
      out << " (" << freezing.shared_programs << " the same bytecode as one before them, frozen once)";
    }
    out << "\n";
  } else if (!freezing.kept_because.empty()) {
    out << "bind-time: attributes read at run time, not frozen: " << freezing.kept_because << "\n";
  }
}

// How many call sites run what: "compiled" (in a oneDNN Graph kernel, alone or fused), "folded",
// "channels_last", "generated" (a generated kernel as bound), "jit" (TorchScript's own), "dispatcher".
std::map<std::string, size_t> call_sites_by_kind(const std::vector<CallSite>& sites) {
  std::map<std::string, size_t> kinds;
  for (const CallSite& site : sites) {
    const std::string& runs = site.runs;
    if (runs.find("+fused(") != std::string::npos || runs.find("+onednn(") != std::string::npos) {
      ++kinds["compiled"];
    } else if (runs.find("+folded") != std::string::npos) {
      ++kinds["folded"];
    } else if (runs.find("+channels_last") != std::string::npos) {
      ++kinds["channels_last"];
    } else if (runs == "static") {
      ++kinds["generated"];
    } else {
      ++kinds[runs];
    }
  }
  return kinds;
}

// Where the model's call sites run, in one line.
void print_call_site_summary(std::ostream& out, const RunReport& report) {
  out << "call sites: " << report.call_sites.size() << " (";
  const char* separator = "";
  for (const auto& [kind, count] : call_sites_by_kind(report.call_sites)) {
    out << separator << count << " " << kind;
    separator = ", ";
  }
  out << ")\n";
}

// Per operator: how many call sites, and two of their counters summed.
struct OpCounts {
  size_t sites = 0;
  int64_t first = 0, second = 0;
};

template <typename Call, typename Counter>
std::map<std::string, OpCounts> counts_by_op(const std::vector<Call>& calls, Counter first, Counter second) {
  std::map<std::string, OpCounts> by_op;
  for (const Call& call : calls) {
    OpCounts& counts = by_op[call.op];
    counts.sites += 1;
    counts.first += call.*first;
    counts.second += call.*second;
  }
  return by_op;
}

std::string short_op_name(const std::string& op) {
  return op.rfind("aten::", 0) == 0 ? op.substr(6) : op;
}

// The call sites run in another layout, one line per operator.
void print_layout_text(std::ostream& out, const RunReport& report) {
  const auto by_op =
      counts_by_op(report.layout_calls, &LayoutCallSite::channels_last_calls, &LayoutCallSite::stock_calls);
  for (const auto& [op, counts] : by_op) {
    const bool max_pool = op == "aten::max_pool2d";
    out << "bind-time: " << counts.sites << " " << short_op_name(op)
        << (max_pool ? " call site(s) run channels_last where that is faster (results contiguous as the stock "
                       "kernel gives them, the same values): "
                     : " call site(s) pool a site's channels_last result as it is where that agrees with the "
                       "contiguous input's result within 1e-5: ")
        << counts.first << " call(s) channels_last, " << counts.second << " as the stock kernels would\n";
  }
}

// The products and sums written in place, one line per operator.
void print_in_place_text(std::ostream& out, const RunReport& report) {
  const auto by_op =
      counts_by_op(report.in_place_calls, &InPlaceCallSite::in_place_calls, &InPlaceCallSite::allocating_calls);
  for (const auto& [op, counts] : by_op) {
    out << "bind-time: " << counts.sites << " " << short_op_name(op)
        << " call site(s) write into an operand nothing else holds (the same values, no result to allocate): "
        << counts.first << " call(s) in place, " << counts.second << " allocating as the stock kernels do\n";
  }
}

// The quantized calls choosing their engine (--qengine auto): how many, and the calls each engine served.
void print_quantized_engines_text(std::ostream& out, const RunReport& report) {
  if (report.quantized_engine_calls.empty()) {
    if (report.choose_quantized_engines) {
      out << "bind-time: --qengine auto: no quantized::conv2d, conv2d_relu, linear or linear_relu call is given "
             "constant packed weights (a frozen model's, or one the stage freezes; dynamic quantization's "
             "linear_dynamic is not covered): every call keeps the loaded engine's kernels\n";
    }
    return;
  }
  std::map<std::string, int64_t> calls_by_engine;
  std::map<std::string, int> sites_by_engine; // call sites whose calls an engine served most
  std::vector<std::string> notes;
  size_t choosing = 0;
  for (const QuantizedEngineCallSite& call : report.quantized_engine_calls) {
    choosing += call.engines.size() > 1 ? 1 : 0;
    size_t most = 0;
    for (size_t i = 0; i < call.engines.size() && i < call.calls.size(); ++i) {
      calls_by_engine[call.engines[i]] += call.calls[i];
      most = call.calls[i] > call.calls[most] ? i : most;
    }
    if (!call.calls.empty()) {
      ++sites_by_engine[call.engines[most]];
    }
    for (const std::string& note : call.notes) {
      notes.push_back(short_op_name(call.op) + " at " + call.function + ", instruction " +
                      std::to_string(call.instruction) + ": " + note);
    }
  }
  out << "bind-time: " << choosing << " of " << report.quantized_engine_calls.size()
      << " quantized conv/linear call site(s) choose their engine per input shape (--qengine auto; within one "
         "quantization step of the loaded engine's result at each call):";
  const char* separator = " ";
  for (const auto& [engine, calls] : calls_by_engine) {
    out << separator << engine << " " << calls << " call(s) at " << sites_by_engine[engine] << " site(s)";
    separator = ", ";
  }
  out << "\n";
  for (const std::string& note : notes) {
    out << "  note: " << note << "\n";
  }
}

// Whether thread arenas were advised for transparent huge pages, and how much of the process sits on them.
void print_huge_pages_text(std::ostream& out, const RunReport& report) {
  const HugePages& pages = report.huge_pages;
  constexpr size_t kMegabyte = size_t{1} << 20;
  out << "memory:    ";
  if (pages.advised_bytes > 0) {
    out << "thread arenas on huge pages (" << pages.advised_bytes / kMegabyte << " MB advised)";
  } else if (pages.asked) {
    out << "no thread arena on huge pages: "
        << (pages.not_advised_because.empty() ? "only the main thread ran the model (its heap stays on 4 kB pages)"
                                              : pages.not_advised_because);
  } else {
    out << "heap as glibc sets it up (--default-malloc)";
  }
  if (report.load_timings.heap_prefaulted_bytes > 0) {
    out << "; " << report.load_timings.heap_prefaulted_bytes / kMegabyte << " MB of heap faulted in ahead while loading";
  }
  out << "; " << pages.process_huge_page_bytes / kMegabyte << " MB of this process on 2 MB pages (THP mode "
      << (pages.system_mode.empty() ? "unknown" : pages.system_mode) << ")\n";
}

// The bind-time stage's sites, grouped by what they run, with their calls.
void print_model_check_text(std::ostream& out, const ModelCheckReport& check) {
  if (!check.not_run_because.empty()) {
    out << "  model check: not run (" << check.not_run_because << ")\n";
    return;
  }
  if (check.checks.empty()) {
    out << "  model check: not run yet (the runs had not settled, or ran no compiled kernel)\n";
  }
  for (const ModelCheckOfInputs& checked : check.checks) {
    out << "  model check on " << checked.inputs << ": ";
    if (!checked.compared) {
      out << "no verdict (" << checked.note << "); the races' choices stand\n";
      continue;
    }
    out << (checked.compiled_kept ? "compiled kernels kept" : "compiled kernels turned off, every site runs its generated kernels")
        << std::fixed << std::setprecision(2) << " (a run " << checked.with_compiled_ms << " ms with them, "
        << checked.without_compiled_ms << " ms without; median ratio " << std::setprecision(3) << checked.median_ratio
        << " over " << checked.pairs << " interleaved pairs)" << std::defaultfloat << "\n";
  }
}

void print_specialization_text(std::ostream& out, const RunReport& report) {
  if (!report.specialize) {
    return;
  }
  print_freezing_text(out, report);
  print_call_site_summary(out, report);
  print_folded_text(out, report);
  print_layout_text(out, report);
  print_in_place_text(out, report);
  print_quantized_engines_text(out, report);
  if (report.specialized_sites.empty()) {
    out << "bind-time: no call site to specialise (conv2d or linear with constant weights)\n";
    return;
  }
  std::map<std::string, int> by_kind;
  int64_t specialized = 0, generated = 0;
  std::map<std::string, size_t> calls_by_op; // conv2d / linear call sites covered
  double prepare_ms = 0;
  std::vector<std::string> notes;
  for (const SpecializedCallSite& site : report.specialized_sites) {
    by_kind[site.runs] += 1;
    for (const std::string& op : site.fused) {
      if (op == "aten::conv2d" || op == "aten::linear") {
        calls_by_op[op.substr(6)] += 1;
      }
    }
    prepare_ms += site.prepare_ms;
    specialized += site.specialized_calls;
    generated += site.generated_calls;
    for (const std::string& note : site.notes) {
      notes.push_back(site.function + " @" + std::to_string(site.instruction) + ": " + note);
    }
  }
  size_t covered = 0;
  std::string by_op;
  for (const auto& [op, count] : calls_by_op) {
    covered += count;
    by_op += (by_op.empty() ? "" : ", ") + std::to_string(count) + " " + op;
  }
  out << "bind-time: " << covered << " call site(s) (" << by_op << ") re-bound to " << report.specialized_sites.size()
      << " oneDNN Graph kernels (";
  const char* separator = "";
  for (const auto& [kind, count] : by_kind) {
    out << separator << count << " " << kind;
    separator = ", ";
  }
  const BackgroundPreparationStatus& background = report.background_preparation;
  out << "); calls: " << specialized << " compiled kernel, " << generated
      << " generated kernels (each shape's first call, and shapes a site does not take); compiling and checking "
      << std::fixed << std::setprecision(1) << prepare_ms;
  if (background.runs > 0) {
    out << " ms, in " << background.runs << " background run(s) of " << background.busy_ms
        << " ms after the first run (waited " << report.kernels_waited_ms << " ms)";
  } else {
    out << " ms, in the first run";
  }
  out << std::defaultfloat << "\n";
  if (!background.first_call_because.empty()) {
    out << "  prepared on first calls, not in the background: " << background.first_call_because << "\n";
  }
  if (!background.error.empty()) {
    out << "  background preparation failed (its sites keep their generated kernels): " << background.error << "\n";
  }
  for (const std::string& note : notes) {
    out << "  kept generated: " << note << "\n";
  }
  print_model_check_text(out, report.model_check);
}

std::string json_int_list(const std::vector<size_t>& values) {
  std::string list = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    list += (i ? ", " : "") + std::to_string(values[i]);
  }
  return list + "]";
}

void print_specialization_json(std::ostream& out, const RunReport& report) {
  const BackgroundPreparationStatus& background = report.background_preparation;
  out << ", \"specialize\": " << (report.specialize ? "true" : "false") << ", \"background_preparation\": {\"runs\": "
      << background.runs << ", \"busy_ms\": " << background.busy_ms << ", \"waited_ms\": " << report.kernels_waited_ms
      << ", \"error\": " << json_string(background.error)
      << ", \"first_call_because\": " << json_string(background.first_call_because) << "}";
  out << ", \"model_check\": {\"not_run_because\": " << json_string(report.model_check.not_run_because)
      << ", \"checks\": [";
  for (size_t i = 0; i < report.model_check.checks.size(); ++i) {
    const ModelCheckOfInputs& checked = report.model_check.checks[i];
    out << (i ? ", " : "") << "{\"inputs\": " << json_string(checked.inputs)
        << ", \"compared\": " << (checked.compared ? "true" : "false")
        << ", \"compiled_kept\": " << (checked.compiled_kept ? "true" : "false") << ", \"pairs\": " << checked.pairs
        << ", \"with_compiled_ms\": " << checked.with_compiled_ms
        << ", \"without_compiled_ms\": " << checked.without_compiled_ms
        << ", \"median_ratio\": " << checked.median_ratio << ", \"note\": " << json_string(checked.note) << "}";
  }
  out << "]}";
  const AttributeFreezingReport& freezing = report.attribute_freezing;
  out << ", \"attribute_freezing\": {\"applied\": " << (freezing.applied ? "true" : "false")
      << ", \"kept_because\": " << json_string(freezing.kept_because) << ", \"attribute_reads\": "
      << freezing.attribute_reads << ", \"folded_batch_norms\": " << freezing.folded_batch_norms
      << ", \"folded_weights\": " << freezing.folded_weights
      << ", \"folded_in_place\": " << freezing.folded_in_place << ", \"constant_branches\": " << freezing.constant_branches << ", \"computed_calls\": " << freezing.computed_calls
      << ", \"removed_dropouts\": " << freezing.removed_dropouts
      << ", \"removed_instructions\": " << freezing.removed_instructions
      << ", \"frozen_functions\": " << freezing.frozen_functions
      << ", \"shared_programs\": " << freezing.shared_programs << "}, \"call_sites_by_kind\": {";
  const char* separator = "";
  for (const auto& [kind, count] : call_sites_by_kind(report.call_sites)) {
    out << separator << json_string(kind) << ": " << count;
    separator = ", ";
  }
  out << "}, \"call_sites\": [";
  for (size_t i = 0; i < report.call_sites.size(); ++i) {
    const CallSite& site = report.call_sites[i];
    out << (i ? ", " : "") << "{\"function\": " << json_string(site.function) << ", \"instruction\": " << site.instruction
        << ", \"op\": " << json_string(site.op.name) << ", \"runs\": " << json_string(site.runs) << "}";
  }
  out << "], \"layout_calls\": [";
  for (size_t i = 0; i < report.layout_calls.size(); ++i) {
    const LayoutCallSite& call = report.layout_calls[i];
    out << (i ? ", " : "") << "{\"function\": " << json_string(call.function) << ", \"instruction\": "
        << call.instruction << ", \"op\": " << json_string(call.op) << ", \"channels_last_calls\": "
        << call.channels_last_calls << ", \"stock_calls\": " << call.stock_calls << "}";
  }
  out << "], \"in_place_calls\": [";
  for (size_t i = 0; i < report.in_place_calls.size(); ++i) {
    const InPlaceCallSite& call = report.in_place_calls[i];
    out << (i ? ", " : "") << "{\"function\": " << json_string(call.function) << ", \"instruction\": "
        << call.instruction << ", \"op\": " << json_string(call.op) << ", \"in_place_calls\": "
        << call.in_place_calls << ", \"allocating_calls\": " << call.allocating_calls << "}";
  }
  out << "], \"quantized_engine_calls\": [";
  for (size_t i = 0; i < report.quantized_engine_calls.size(); ++i) {
    const QuantizedEngineCallSite& call = report.quantized_engine_calls[i];
    out << (i ? ", " : "") << "{\"function\": " << json_string(call.function) << ", \"instruction\": "
        << call.instruction << ", \"op\": " << json_string(call.op) << ", \"engines\": "
        << json_string_list(call.engines) << ", \"calls\": [";
    for (size_t e = 0; e < call.calls.size(); ++e) {
      out << (e ? ", " : "") << call.calls[e];
    }
    out << "], \"notes\": " << json_string_list(call.notes) << "}";
  }
  out << "], \"folded_calls\": [";
  for (size_t i = 0; i < report.folded_calls.size(); ++i) {
    const FoldedCallSite& call = report.folded_calls[i];
    out << (i ? ", " : "") << "{\"function\": " << json_string(call.function) << ", \"instruction\": " << call.instruction
        << ", \"op\": " << json_string(call.op) << ", \"computed\": " << call.computed << ", \"reused\": " << call.reused
        << "}";
  }
  out << "], \"specialized_sites\": [";
  for (size_t i = 0; i < report.specialized_sites.size(); ++i) {
    const SpecializedCallSite& site = report.specialized_sites[i];
    out << (i ? ", " : "") << "{\"function\": " << json_string(site.function) << ", \"instruction\": " << site.instruction
        << ", \"fused\": " << json_string_list(site.fused) << ", \"fused_instructions\": " << json_int_list(site.fused_instructions)
        << ", \"runs\": " << json_string(site.runs)
        << ", \"result_layout\": " << json_string(site.result_layout)
        << ", \"specialized_calls\": " << site.specialized_calls << ", \"generated_calls\": " << site.generated_calls
        << ", \"prepare_ms\": " << site.prepare_ms << ", \"notes\": " << json_string_list(site.notes) << "}";
  }
  out << "]";
}

} // namespace

void print_text(std::ostream& out, const RunReport& report) {
  out << "model:     " << report.model << "\n";
  out << "dispatch:  " << report.dispatch << ", " << report.interpreter << " interpreter, quantized engine "
      << report.qengine << "\n";
  out << "operators: " << report.ops.size();
  const char* separator = " (";
  for (const auto& [path, count] : count_by_path(report.ops)) {
    out << separator << count << " " << path;
    separator = ", ";
  }
  out << (report.ops.empty() ? "" : ")") << "\n";
  for (const auto& op : report.ops) {
    out << "  " << std::left << std::setw(12) << op.path << op.name;
    if (!op.reason.empty()) {
      out << "  (" << op.reason << ")";
    }
    out << "\n";
  }
  print_specialization_text(out, report);
  out << "inputs:    " << report.input_source << "\n";
  out << std::fixed << std::setprecision(3);
  const LoadTimings& t = report.load_timings;
  out << "load:      " << report.load_ms << " ms: file check " << t.file_check_ms << ", LibTorch's loader "
      << t.libtorch_load_ms << ", binding " << t.bind_ms << ", bind-time stage " << t.specialize_ms
      << ", bytecode check " << t.prepare_ms << " ms\n";
  out << "timing:    load " << report.load_ms << " ms, first run " << report.first_run_ms << " ms ("
      << report.first_run_page_faults << " page faults), median "
      << report.median_ms << " ms, min " << report.min_ms << " ms over " << report.iters << " runs, "
      << std::setprecision(0) << report.page_faults_per_run << std::setprecision(3) << " page faults per run"
      << (report.default_malloc ? " (glibc's default malloc thresholds)" : "");
  if (report.threads > 0) {
    out << ", " << report.threads << " thread(s)";
  }
  out << "\n";
  print_huge_pages_text(out, report);
  if (report.parallel_threads > 0) {
    out << "parallel:  " << report.parallel_threads << " threads, " << report.parallel_runs << " runs in "
        << report.parallel_seconds << " s (" << report.parallel_runs / report.parallel_seconds << " runs/s); "
        << (report.parallel_outputs_identical ? "every output identical to the single-threaded run"
                                              : "OUTPUTS DIFFERED from the single-threaded run")
        << "\n";
  }
  if (report.profile_runs > 0) {
    print_profile_text(out, report);
  }
  out << std::defaultfloat;
  if (!report.outputs_match.has_value()) {
    out << "outputs:   " << report.num_outputs << " tensor(s), no reference to compare with\n";
  } else if (*report.outputs_match) {
    out << "result:    MATCH: " << report.num_outputs << " output tensor(s) equal " << *report.expected_source
        << " (max abs diff " << report.max_abs_diff << ")\n";
  } else {
    out << "result:    MISMATCH against " << *report.expected_source << ": " << report.mismatch << "\n";
  }
}

void print_json(std::ostream& out, const RunReport& report) {
  out << std::setprecision(17);
  out << "{\"model\": " << json_string(report.model) << ", \"dispatch\": " << json_string(report.dispatch)
      << ", \"interpreter\": " << json_string(report.interpreter)
      << ", \"ops\": [";
  for (size_t i = 0; i < report.ops.size(); ++i) {
    out << (i ? ", " : "") << "{\"name\": " << json_string(report.ops[i].name)
        << ", \"path\": " << json_string(report.ops[i].path);
    if (!report.ops[i].reason.empty()) {
      out << ", \"reason\": " << json_string(report.ops[i].reason);
    }
    out << "}";
  }
  out << "], \"qengine\": " << json_string(report.qengine)
      << ", \"qengine_auto\": " << (report.choose_quantized_engines ? "true" : "false") << ", \"inputs\": " << json_string(report.input_source) << ", \"expected\": "
      << (report.expected_source ? json_string(*report.expected_source) : "null") << ", \"outputs_match\": "
      << (report.outputs_match ? (*report.outputs_match ? "true" : "false") : "null")
      << ", \"max_abs_diff\": " << report.max_abs_diff << ", \"mismatch\": " << json_string(report.mismatch)
      << ", \"num_outputs\": " << report.num_outputs << ", \"load_ms\": " << report.load_ms
      << ", \"load_stages_ms\": {\"file_check\": " << report.load_timings.file_check_ms
      << ", \"libtorch_load\": " << report.load_timings.libtorch_load_ms << ", \"bind\": " << report.load_timings.bind_ms
      << ", \"specialize\": " << report.load_timings.specialize_ms
      << ", \"bytecode_check\": " << report.load_timings.prepare_ms << "}"
      << ", \"heap_prefaulted_bytes\": " << report.load_timings.heap_prefaulted_bytes
      << ", \"first_run_ms\": " << report.first_run_ms << ", \"median_ms\": " << report.median_ms
      << ", \"min_ms\": " << report.min_ms << ", \"page_faults_per_run\": " << report.page_faults_per_run
      << ", \"first_run_page_faults\": " << report.first_run_page_faults
      << ", \"malloc\": " << json_string(report.default_malloc ? "default" : "heap") << ", \"iters\": " << report.iters << ", \"threads\": " << report.threads;
  const HugePages& pages = report.huge_pages;
  out << ", \"huge_pages\": {\"system_mode\": " << json_string(pages.system_mode) << ", \"heap_advised\": "
      << (pages.advised_bytes > 0 ? "true" : "false") << ", \"advised_bytes\": " << pages.advised_bytes
      << ", \"not_advised_because\": " << json_string(pages.not_advised_because)
      << ", \"process_huge_page_bytes\": " << pages.process_huge_page_bytes << "}";
  if (report.parallel_threads > 0) {
    out << ", \"parallel\": {\"threads\": " << report.parallel_threads << ", \"runs\": " << report.parallel_runs
        << ", \"seconds\": " << report.parallel_seconds
        << ", \"runs_per_s\": " << report.parallel_runs / report.parallel_seconds
        << ", \"outputs_identical\": " << (report.parallel_outputs_identical ? "true" : "false") << "}";
  }
  if (report.profile_runs > 0) {
    print_profile_json(out, report);
  }
  print_specialization_json(out, report);
  out << "}\n";
}

void print_op_list_json(std::ostream& out, c10::ArrayRef<GeneratedKernel> kernels) {
  out << "{\"ops\": [";
  for (size_t i = 0; i < kernels.size(); ++i) {
    out << (i ? ", " : "") << "{\"name\": " << json_string(kernels[i].op_name)
        << ", \"schema\": " << json_string(kernels[i].schema)
        << ", \"path\": " << json_string(kernels[i].dispatcher_reason ? "dispatcher" : "static");
    if (kernels[i].dispatcher_reason) {
      out << ", \"reason\": " << json_string(kernels[i].dispatcher_reason);
    }
    out << "}";
  }
  out << "]}\n";
}

} // namespace lightweight_dispatch
