// lite_predictor: load a lite-interpreter model, bind its operators, run, compare, time, report.
#include <lightweight_dispatch/kernel_table.h>
#include <lightweight_dispatch/runtime.h>
#include <lightweight_dispatch/values.h>
#include <lite_predictor/cli_options.h>
#include <lite_predictor/crash_guard.h>
#include <lite_predictor/op_profile.h>
#include <lite_predictor/run_report.h>

#include <ATen/Parallel.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

namespace ld = lightweight_dispatch;

namespace {

enum ExitCode : int {
  kOk = 0,
  kOutputsDiffer = 1,
  kUsage = 2,
  kCannotLoad = 3,
  kOpNotInBuild = 4,
  kBadInputs = 5,
  kRunFailed = 6,
};

// An error that ends the run with a message on stderr and a documented exit code.
struct Failure {
  ExitCode code;
  std::string message;
};

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// TEST ONLY. LIGHTWEIGHT_DISPATCH_TEST_ONLY_CRASH=segv raises SIGSEGV just before the predictor runs the
// model, where a damaged file would crash a LibTorch kernel: tests/test_reliability.py uses it to check the crash
// guard end to end, because the file checks refuse every damaged file known to crash LibTorch. No model file or
// option can reach this; only that exact variable and value do.
void crash_if_a_test_asks() {
  const char* crash = std::getenv("LIGHTWEIGHT_DISPATCH_TEST_ONLY_CRASH");
  if (crash != nullptr && std::string(crash) == "segv") {
    std::raise(SIGSEGV);
  }
}

// MODEL.ptl -> MODEL<suffix>, the convention scripts/dump_ops.py writes inputs and references under.
std::string sibling_file(const std::string& model_path, const std::string& suffix) {
  std::filesystem::path path(model_path);
  return (path.parent_path() / (path.stem().string() + suffix)).string();
}

// Loads, checks and binds the model through the runtime's API; its errors become exit codes.
ld::Model load_model(const ld::Options& options) {
  ld::LoadOptions load_options;
  load_options.dispatch = options.dispatch == ld::DispatchMode::Static ? ld::Dispatch::Static : ld::Dispatch::Dynamic;
  load_options.interpreter =
      options.interpreter == ld::InterpreterKind::Lightweight ? ld::Interpreter::Lightweight : ld::Interpreter::Stock;
  load_options.quantized_engine = options.qengine;
  load_options.keep_large_allocations_in_heap = !options.default_malloc;
  load_options.heap_on_huge_pages = !options.default_malloc;
  load_options.prefault_heap = options.heap_prefault && !options.default_malloc;
  load_options.specialize = options.specialize;
  load_options.preparation = options.prepare_on_first_call ? ld::Preparation::FirstCall : ld::Preparation::Background;
  load_options.model_check = options.model_check;
  load_options.choose_quantized_engines = options.choose_quantized_engines;
  try {
    return ld::Model::load(options.model_path, load_options);
  } catch (const ld::OptionError& e) {
    throw Failure{kUsage, e.what()};
  } catch (const ld::MissingOperatorsError& e) {
    throw Failure{kOpNotInBuild, e.what()};
  } catch (const ld::ModelLoadError& e) {
    throw Failure{kCannotLoad, e.what()};
  }
}

std::vector<at::Tensor> load_tensors(const std::string& path) {
  try {
    return ld::load_tensor_list(path);
  } catch (const ld::TensorFileError& e) {
    throw Failure{kBadInputs, ld::printable_first_line(e.what())};
  }
}

std::vector<c10::IValue> load_arguments(const std::string& path) {
  try {
    return ld::load_argument_list(path);
  } catch (const ld::TensorFileError& e) {
    throw Failure{kBadInputs, ld::printable_first_line(e.what())};
  }
}

bool has_forward(const ld::Model& model) {
  const auto names = model.method_names();
  return std::find(names.begin(), names.end(), "forward") != names.end();
}

// A user's tensors must have the dtypes and ranks of the example inputs the model was exported with
// (when dump_ops.py saved them beside it), argument by argument and inside lists and dicts; sizes may differ.
void check_against_example_inputs(
    const c10::FunctionSchema* schema,
    const std::vector<c10::IValue>& given,
    const std::string& source,
    const std::string& example_path) {
  if (!std::filesystem::exists(example_path)) {
    return;
  }
  if (const auto mismatch = ld::first_tensor_mismatch(schema, given, load_arguments(example_path))) {
    throw Failure{kBadInputs, source + ": " + *mismatch + " (" + example_path + ")"};
  }
}

struct Inputs {
  std::vector<c10::IValue> values;
  std::string source;
};

// forward's arguments: the file's (--input, or the example inputs beside the model), checked against
// forward's schema and completed with its defaults, all before anything runs or is written.
Inputs resolve_inputs(const ld::Options& options, const ld::Model& model) {
  const std::string beside = sibling_file(options.model_path, ".inputs.pt");
  std::vector<c10::IValue> given;
  std::optional<std::string> source;
  if (options.input_path) {
    given = load_arguments(*options.input_path);
    source = *options.input_path;
  } else if (std::filesystem::exists(beside)) {
    given = load_arguments(beside);
    source = beside;
  }
  if (!has_forward(model)) {
    throw Failure{kCannotLoad, "the model has no forward method"};
  }
  const c10::FunctionSchema* forward_schema = model.method_schema("forward");
  if (forward_schema == nullptr) {
    // Bytecode without a schema: no count, types or defaults to check against; the values as they are.
    if (options.input_path) {
      check_against_example_inputs(nullptr, given, *source, beside);
    }
    return {given, source.value_or("(none)")};
  }
  const c10::FunctionSchema& schema = *forward_schema;
  std::vector<c10::IValue> values;
  try {
    values = ld::bind_arguments(schema, given);
  } catch (const ld::ArgumentError& e) {
    if (!source) {
      throw Failure{
          kBadInputs,
          "the model needs inputs: pass --input FILE (a torch.save'd list of the arguments of " +
              ld::forward_signature(schema) + ")"};
    }
    throw Failure{kBadInputs, *source + ": " + e.what()};
  }
  if (options.input_path) {
    check_against_example_inputs(&schema, given, *source, beside);
  }
  return {std::move(values), source.value_or("(none: forward's defaults)")};
}

c10::IValue run_once(const ld::Model& model, const std::vector<c10::IValue>& inputs) {
  try {
    return model.forward(inputs);
  } catch (const ld::RunError& e) {
    throw Failure{kRunFailed, e.what()};
  } catch (const ld::ModelLoadError& e) {
    throw Failure{kCannotLoad, e.what()};
  }
}

std::vector<at::Tensor> flatten(const c10::IValue& output) {
  try {
    return ld::flatten_outputs(output);
  } catch (const std::exception& e) {
    throw Failure{kRunFailed, e.what()};
  }
}

// This process's minor page faults so far: each fresh page a run touches (an mmap'd temporary) is one.
long minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The calling thread's minor page faults so far (not the helper thread's, which faults in pages on purpose).
long this_threads_minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

void time_steady_state(
    const ld::Model& module, const Inputs& inputs, const ld::Options& options, ld::RunReport& report) {
  for (int i = 0; i < options.warmup; ++i) {
    run_once(module, inputs.values);
  }
  std::vector<double> times;
  const long faults_before = minor_page_faults();
  for (int i = 0; i < options.iters; ++i) {
    const auto start = Clock::now();
    run_once(module, inputs.values);
    times.push_back(ms_since(start));
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  report.median_ms = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  report.min_ms = times.front();
  report.page_faults_per_run = static_cast<double>(minor_page_faults() - faults_before) / options.iters;
}

// --iters more runs with every operator call timed; apart from the steady-state timing, whose runs
// have no per-call timer.
void profile_ops(const ld::Model& module, const Inputs& inputs, const ld::Options& options, ld::RunReport& report) {
  const ld::OpProfiler profiler;
  const auto start = Clock::now();
  for (int i = 0; i < options.iters; ++i) {
    run_once(module, inputs.values);
  }
  report.profile_ms = ms_since(start);
  report.profile_runs = options.iters;
  report.op_profile = profiler.timings();
}

// K threads share the one loaded, bound module; each runs it --iters times and compares every
// output with the single-threaded one, bit for bit.
void run_parallel(
    const ld::Model& module,
    const Inputs& inputs,
    const std::vector<at::Tensor>& reference,
    const ld::Options& options,
    ld::RunReport& report) {
  std::atomic<int> differing{0};
  std::atomic<int> failed{0};
  std::vector<std::string> errors(options.parallel);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int t = 0; t < options.parallel; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < options.iters; ++i) {
          if (!ld::identical_outputs(flatten(run_once(module, inputs.values)), reference)) {
            differing.fetch_add(1);
          }
        }
      } catch (const Failure& failure) {
        errors[t] = failure.message;
        failed.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  report.parallel_seconds = ms_since(start) / 1000.0;
  if (failed.load() > 0) {
    const auto first = std::find_if(errors.begin(), errors.end(), [](const std::string& e) { return !e.empty(); });
    throw Failure{kRunFailed, "a --parallel run failed: " + *first};
  }
  report.parallel_threads = options.parallel;
  report.parallel_runs = options.parallel * options.iters;
  report.parallel_outputs_identical = differing.load() == 0;
}

ExitCode compare_with_reference(
    const ld::Options& options, const std::vector<at::Tensor>& outputs, ld::RunReport& report) {
  const std::string beside = sibling_file(options.model_path, ".expected.pt");
  if (options.expected_path) {
    report.expected_source = *options.expected_path;
  } else if (std::filesystem::exists(beside)) {
    report.expected_source = beside;
  } else {
    return kOk;
  }
  const ld::Comparison comparison =
      ld::compare_outputs(outputs, load_tensors(*report.expected_source), options.atol, options.rtol);
  if (!comparison.fits) {
    throw Failure{
        kBadInputs, *report.expected_source + ": the reference does not fit the model's outputs: " + comparison.mismatch};
  }
  report.outputs_match = comparison.match;
  report.max_abs_diff = comparison.max_abs_diff;
  report.mismatch = comparison.mismatch;
  return comparison.match ? kOk : kOutputsDiffer;
}

int run(const ld::Options& options, const ld::PhaseReporter& phase) {
  if (options.threads > 0) {
    at::set_num_threads(options.threads);
  }
  ld::RunReport report;
  report.model = options.model_path;
  report.default_malloc = options.default_malloc;
  report.dispatch = options.dispatch == ld::DispatchMode::Static ? "static" : "dynamic";
  report.interpreter = ld::interpreter_name(options.interpreter);
  report.threads = options.threads;
  report.iters = options.iters;

  phase.enter(ld::Phase::Loading);
  const auto load_start = Clock::now();
  const ld::Model module = load_model(options);
  report.load_ms = ms_since(load_start);
  report.load_timings = module.load_timings();
  report.ops = module.operators();
  report.qengine = ld::current_quantized_engine();
  const Inputs inputs = resolve_inputs(options, module);
  report.input_source = inputs.source;

  phase.enter(ld::Phase::Running);
  crash_if_a_test_asks();
  const long faults_before_first = this_threads_minor_page_faults();
  const auto first_start = Clock::now();
  c10::IValue output = run_once(module, inputs.values);
  report.first_run_ms = ms_since(first_start);
  report.first_run_page_faults = this_threads_minor_page_faults() - faults_before_first;
  if (module.background_preparation().runs > 0) {
    // The first run had the generated kernels: wait for the compiled ones, and check what they give.
    const auto wait_start = Clock::now();
    module.wait_for_kernels();
    report.kernels_waited_ms = ms_since(wait_start);
    output = run_once(module, inputs.values);
  }
  report.background_preparation = module.background_preparation();
  report.load_timings.heap_prefaulted_bytes = module.load_timings().heap_prefaulted_bytes; // final after a run
  const std::vector<at::Tensor> outputs = flatten(output);
  report.num_outputs = outputs.size();
  time_steady_state(module, inputs, options, report);
  report.huge_pages = ld::huge_pages();
  if (options.profile_ops) {
    profile_ops(module, inputs, options, report);
  }
  if (options.parallel > 0) {
    run_parallel(module, inputs, outputs, options, report);
  }

  report.specialize = options.specialize && options.dispatch == ld::DispatchMode::Static;
  report.call_sites = module.call_sites();
  report.specialized_sites = module.specialized_sites(); // after the runs: their counters
  report.folded_calls = module.folded_calls();
  report.attribute_freezing = module.attribute_freezing();
  report.model_check = module.model_check();
  report.layout_calls = module.layout_calls(); // after the runs: their counters
  report.in_place_calls = module.in_place_calls();
  report.choose_quantized_engines = options.choose_quantized_engines;
  report.quantized_engine_calls = module.quantized_engine_calls();
  ExitCode code = compare_with_reference(options, outputs, report);
  if (options.parallel > 0 && !report.parallel_outputs_identical) {
    code = kRunFailed;
  }
  // Only a run that ends with a verdict (exit 0 or 1) writes the outputs: any failure leaves the file as it was.
  if (options.save_outputs_path && code != kRunFailed) {
    try {
      ld::save_value(*options.save_outputs_path, output);
    } catch (const ld::TensorFileError& e) {
      throw Failure{kUsage, e.what()};
    }
  }
  if (options.json) {
    ld::print_json(std::cout, report);
  } else {
    ld::print_text(std::cout, report);
  }
  return code;
}

int run_reporting_failures(const ld::Options& options, const ld::PhaseReporter& phase) {
  try {
    return run(options, phase);
  } catch (const Failure& failure) {
    std::cerr << "lite_predictor: error: " << failure.message << "\n";
    return failure.code;
  } catch (const std::exception& e) {
    std::cerr << "lite_predictor: error: " << ld::printable_first_line(e.what()) << "\n";
    return kRunFailed;
  }
}

// The build's operator table. Parsing every schema here also proves each one is valid.
int list_ops(bool json) {
  for (const auto& kernel : ld::generated_kernels()) {
    ld::parse_kernel_schema(kernel);
  }
  if (json) {
    ld::print_op_list_json(std::cout, ld::generated_kernels());
  } else {
    for (const auto& kernel : ld::generated_kernels()) {
      std::cout << kernel.op_name << "\n";
    }
  }
  return kOk;
}

// Ends the process without running static destructors: LibTorch's deregister every operator from the
// dispatcher at exit, about a third of a short run's instructions (callgrind: 306M of 1.6G for one
// MobileNetV2 inference). Everything lite_predictor writes is closed by now; the streams are flushed here.
[[noreturn]] void exit_now(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

} // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  ld::Options options;
  try {
    options = ld::parse_options(args, ld::lightweight_dispatch_built());
  } catch (const ld::UsageError& e) {
    std::cerr << "lite_predictor: error: " << e.what() << "\n(lite_predictor --help explains the options)\n";
    exit_now(kUsage);
  }
  if (options.help) {
    std::cout << ld::usage_text();
    exit_now(kOk);
  }
  if (options.list_ops) {
    exit_now(list_ops(options.json));
  }
  exit_now(ld::run_guarded(
      [&](const ld::PhaseReporter& phase) { return run_reporting_failures(options, phase); },
      options.model_path,
      {kRunFailed, kCannotLoad, kRunFailed},
      !options.in_process));
}
