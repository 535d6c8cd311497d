// lite_predictor: load a lite-interpreter model, bind its operators, run, compare, time, report.
#include <lite_predictor/cli_options.h>
#include <lite_predictor/kernel_table.h>
#include <lite_predictor/op_binding.h>
#include <lite_predictor/output_check.h>
#include <lite_predictor/run_report.h>
#include <lite_predictor/tensor_io.h>

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/module.h>
#include <torch/csrc/jit/mobile/parse_operators.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

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

// MODEL.ptl -> MODEL<suffix>, the convention scripts/dump_ops.py writes inputs and references under.
std::string sibling_file(const std::string& model_path, const std::string& suffix) {
  std::filesystem::path path(model_path);
  return (path.parent_path() / (path.stem().string() + suffix)).string();
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

torch::jit::mobile::Module load_model(const std::string& path, ld::DispatchMode mode) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw Failure{kCannotLoad, path + ": no such model file"};
  }
  // Static mode loads without the stock operator check: binding checks every op itself and names
  // all the missing ones at once, including ops only this build provides.
  const uint64_t options =
      mode == ld::DispatchMode::Static ? 0 : torch::jit::kDefaultMobileLoadOptions;
  try {
    torch::jit::ExtraFilesMap extra_files;
    return torch::jit::_load_for_mobile(path, std::nullopt, extra_files, options);
  } catch (const std::exception& e) {
    throw Failure{kCannotLoad, path + ": cannot load as a lite-interpreter model: " + first_line(e.what())};
  }
}

std::vector<c10::IValue> as_inputs(const std::vector<at::Tensor>& tensors) {
  return std::vector<c10::IValue>(tensors.begin(), tensors.end());
}

void check_input_count(const torch::jit::mobile::Module& module, size_t count, const std::string& source) {
  const auto forward = module.find_method("forward");
  if (!forward) {
    throw Failure{kCannotLoad, "the model has no forward method"};
  }
  const auto& function = forward->function();
  if (!function.hasSchema()) {
    return;
  }
  const size_t expected = function.getSchema().arguments().size() - 1; // minus self
  if (expected != count) {
    throw Failure{
        kBadInputs,
        source + ": the model's forward takes " + std::to_string(expected) + " input(s), the file has " +
            std::to_string(count)};
  }
}

std::vector<at::Tensor> load_tensors(const std::string& path) {
  try {
    return ld::load_tensor_list(path);
  } catch (const ld::TensorFileError& e) {
    throw Failure{kBadInputs, e.what()};
  }
}

c10::IValue run_once(torch::jit::mobile::Module& module, const std::vector<c10::IValue>& inputs) {
  // Inference, as a deployed model runs and as the reference outputs were computed (under no_grad):
  // grad mode also picks fused inference paths in some ops (transformer layers).
  c10::InferenceMode inference_mode;
  try {
    return module.forward(inputs);
  } catch (const std::exception& e) {
    throw Failure{kRunFailed, "the model failed while running: " + first_line(e.what())};
  }
}

// The build's operator table. Parsing every schema here also proves each one is valid.
int list_ops(bool json) {
  const ld::KernelIndex index(ld::generated_kernels());
  if (json) {
    ld::print_op_list_json(std::cout, ld::generated_kernels());
  } else {
    for (const auto& kernel : ld::generated_kernels()) {
      std::cout << kernel.op_name << "\n";
    }
  }
  return kOk;
}

int run(const ld::Options& options) {
  if (options.threads > 0) {
    at::set_num_threads(options.threads);
  }
  ld::RunReport report;
  report.model = options.model_path;
  report.dispatch = options.dispatch == ld::DispatchMode::Static ? "static" : "dynamic";
  report.threads = options.threads;
  report.iters = options.iters;

  const auto load_start = Clock::now();
  torch::jit::mobile::Module module = load_model(options.model_path, options.dispatch);
  if (options.dispatch == ld::DispatchMode::Static) {
    const ld::KernelIndex index(ld::generated_kernels());
    try {
      report.ops = ld::bind_static(module, index).ops;
    } catch (const ld::BindingError& e) {
      throw Failure{kOpNotInBuild, options.model_path + ": " + e.what()};
    }
  } else {
    report.ops = ld::describe_dynamic(module).ops;
  }
  report.load_ms = ms_since(load_start);

  // Inputs: the given file, the one dump_ops.py saved beside the model, or none if forward takes none.
  std::vector<at::Tensor> input_tensors;
  const std::string derived_inputs = sibling_file(options.model_path, ".inputs.pt");
  if (options.input_path) {
    input_tensors = load_tensors(*options.input_path);
    report.input_source = *options.input_path;
  } else if (std::filesystem::exists(derived_inputs)) {
    input_tensors = load_tensors(derived_inputs);
    report.input_source = derived_inputs;
  } else {
    report.input_source = "(none)";
  }
  try {
    check_input_count(module, input_tensors.size(), report.input_source);
  } catch (const Failure& failure) {
    if (input_tensors.empty() && !options.input_path) {
      throw Failure{kBadInputs, "the model needs inputs: pass --input FILE (a torch.save'd list of tensors)"};
    }
    throw;
  }
  const std::vector<c10::IValue> inputs = as_inputs(input_tensors);

  auto start = Clock::now();
  const c10::IValue output = run_once(module, inputs);
  report.first_run_ms = ms_since(start);
  for (int i = 0; i < options.warmup; ++i) {
    run_once(module, inputs);
  }
  std::vector<double> times;
  for (int i = 0; i < options.iters; ++i) {
    start = Clock::now();
    run_once(module, inputs);
    times.push_back(ms_since(start));
  }
  std::sort(times.begin(), times.end());
  report.median_ms = times.size() % 2 ? times[times.size() / 2]
                                      : (times[times.size() / 2 - 1] + times[times.size() / 2]) / 2;
  report.min_ms = times.front();

  std::vector<at::Tensor> outputs;
  try {
    outputs = ld::flatten_outputs(output);
  } catch (const std::exception& e) {
    throw Failure{kRunFailed, e.what()};
  }
  report.num_outputs = outputs.size();
  if (options.save_outputs_path) {
    try {
      ld::save_tensor_list(*options.save_outputs_path, outputs);
    } catch (const ld::TensorFileError& e) {
      throw Failure{kUsage, e.what()};
    }
  }

  const std::string derived_expected = sibling_file(options.model_path, ".expected.pt");
  if (options.expected_path) {
    report.expected_source = *options.expected_path;
  } else if (std::filesystem::exists(derived_expected)) {
    report.expected_source = derived_expected;
  }
  if (report.expected_source) {
    const ld::Comparison comparison =
        ld::compare_outputs(outputs, load_tensors(*report.expected_source), options.atol, options.rtol);
    report.outputs_match = comparison.match;
    report.max_abs_diff = comparison.max_abs_diff;
    report.mismatch = comparison.mismatch;
  }

  if (options.json) {
    ld::print_json(std::cout, report);
  } else {
    ld::print_text(std::cout, report);
  }
  return report.outputs_match.value_or(true) ? kOk : kOutputsDiffer;
}

} // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  ld::Options options;
  try {
    options = ld::parse_options(args, ld::lightweight_dispatch_built());
  } catch (const ld::UsageError& e) {
    std::cerr << "lite_predictor: error: " << e.what() << "\n(lite_predictor --help explains the options)\n";
    return kUsage;
  }
  if (options.help) {
    std::cout << ld::usage_text();
    return kOk;
  }
  if (options.list_ops) {
    return list_ops(options.json);
  }
  try {
    return run(options);
  } catch (const Failure& failure) {
    std::cerr << "lite_predictor: error: " << failure.message << "\n";
    return failure.code;
  } catch (const std::exception& e) {
    std::cerr << "lite_predictor: error: " << first_line(e.what()) << "\n";
    return kRunFailed;
  }
}
