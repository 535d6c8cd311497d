// bench_per_op: the per-op instruction counts of a micro model under static dispatch, dynamic dispatch and
// the kernel floor, in one process, for callgrind.
//
//   valgrind --tool=callgrind --instr-atstart=no bench_per_op micro_add_loop --models-dir build/models
//
// Loading, binding and warm-up run uninstrumented (LibTorch's ~1.1e9-instruction start-up costs nothing
// but time); then, for each mode and each iteration count K, callgrind's counters are zeroed, K forward
// passes run, and the counts are dumped under the label "MODEL|MODE|K". The difference between two K
// cancels everything but the per-forward cost (benchmarks/per_op.py does the arithmetic). Outside
// valgrind the client requests do nothing, so the program also runs as a plain check.
#include <benchmarks/bench_model.h>
#include <benchmarks/kernel_floor.h>
#include <lightweight_dispatch/values.h>

#include <ATen/Parallel.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/max.h>
#include <ATen/ops/sub.h>
#include <c10/core/InferenceMode.h>
#include <valgrind/callgrind.h>

#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace ld = lightweight_dispatch;
namespace bench = lightweight_dispatch::bench;

namespace {

constexpr const char* kUsage = R"(usage: bench_per_op MODEL --models-dir DIR [--iters K1,K2] [--warmup W] [--modes M,...]

Runs micro model MODEL (DIR/MODEL.ptl with DIR/MODEL.inputs.pt) under each mode -- static (generated
kernels, lite_predictor's own interpreter loop), static_stock (generated kernels, the stock loop),
dynamic (the stock interpreter and dispatcher), floor (the same kernels called from C++) --
checks every mode's outputs against DIR/MODEL.expected.pt, then for each mode and K runs K forward
passes between callgrind client requests that zero the counters and dump them as "MODEL|MODE|K".
Runs with one intra-op thread. Prints one JSON object. Run it under valgrind --tool=callgrind
--instr-atstart=no.

options:
  --models-dir DIR  where dump_ops.py wrote the models (required)
  --iters K1,K2     forward passes per measurement (default 2,5)
  --warmup W        uninstrumented forward passes per mode first (default 2)
  --modes M,...     any of static, static_stock, dynamic, floor (default all four)
)";

struct Args {
  std::string model;
  std::string models_dir;
  std::vector<int> iters{2, 5};
  int warmup = 2;
  std::vector<std::string> modes{"static", "static_stock", "dynamic", "floor"};
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ',');) {
    parts.push_back(part);
  }
  return parts;
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw std::invalid_argument(arg + " expects a value");
      }
      return argv[++i];
    };
    if (arg == "--models-dir") {
      args.models_dir = value();
    } else if (arg == "--iters") {
      args.iters.clear();
      for (const auto& k : split(value())) {
        args.iters.push_back(std::stoi(k));
      }
    } else if (arg == "--warmup") {
      args.warmup = std::stoi(value());
    } else if (arg == "--modes") {
      args.modes = split(value());
    } else if (!arg.empty() && arg[0] == '-') {
      throw std::invalid_argument("unknown option " + arg);
    } else if (args.model.empty()) {
      args.model = arg;
    } else {
      throw std::invalid_argument("more than one MODEL given");
    }
  }
  if (args.model.empty() || args.models_dir.empty()) {
    throw std::invalid_argument("MODEL and --models-dir are required");
  }
  return args;
}

// One forward pass of one mode, outputs flattened.
using Runner = std::function<std::vector<at::Tensor>()>;

Runner make_runner(const std::string& mode, const Args& args, const std::vector<at::Tensor>& inputs) {
  if (mode == "floor") {
    const bench::FloorFunction& floor = bench::kernel_floor(args.model);
    return [&floor, &inputs] {
      c10::InferenceMode inference_mode;
      return floor(inputs);
    };
  }
  const std::string path = args.models_dir + "/" + args.model + ".ptl";
  std::shared_ptr<const ld::Model> model = bench::load_model(path, bench::parse_mode(mode));
  auto ivalues = std::make_shared<std::vector<c10::IValue>>(bench::as_ivalues(inputs));
  return [model, ivalues] { return ld::flatten_outputs(bench::run_once(*model, *ivalues)); };
}

// The largest absolute difference from the expected outputs; infinity when shapes or counts differ.
double max_abs_diff(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  if (actual.size() != expected.size()) {
    return std::numeric_limits<double>::infinity();
  }
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i].sizes() != expected[i].sizes() || actual[i].dtype() != expected[i].dtype()) {
      return std::numeric_limits<double>::infinity();
    }
    if (actual[i].numel() > 0) {
      const auto diff = at::abs(at::sub(actual[i].to(at::kDouble), expected[i].to(at::kDouble))).max();
      worst = std::max(worst, diff.item<double>());
    }
  }
  return worst;
}

} // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_per_op: error: " << e.what() << "\n\n" << kUsage;
    return 2;
  }
  // One intra-op thread: per-op overhead is a single-thread cost, and under callgrind (which serialises
  // threads) OpenMP workers spinning at a barrier would add millions of instructions that vary run to run.
  at::set_num_threads(1);
  try {
    const std::string stem = args.models_dir + "/" + args.model;
    const std::vector<at::Tensor> inputs = ld::load_tensor_list(stem + ".inputs.pt");
    const std::vector<at::Tensor> expected = ld::load_tensor_list(stem + ".expected.pt");

    std::vector<Runner> runners;
    std::ostringstream checks;
    for (const auto& mode : args.modes) {
      runners.push_back(make_runner(mode, args, inputs));
      const double diff = max_abs_diff(runners.back()(), expected);
      checks << (checks.tellp() > 0 ? ", " : "") << "{\"mode\": \"" << mode << "\", \"max_abs_diff\": " << diff
             << ", \"outputs_match\": " << (diff <= 1e-5 ? "true" : "false") << "}";
      for (int i = 0; i < args.warmup; ++i) {
        runners.back()();
      }
    }

    CALLGRIND_START_INSTRUMENTATION;
    std::ostringstream measurements;
    for (size_t m = 0; m < args.modes.size(); ++m) {
      for (const int k : args.iters) {
        const std::string label = args.model + "|" + args.modes[m] + "|" + std::to_string(k);
        CALLGRIND_ZERO_STATS;
        for (int i = 0; i < k; ++i) {
          runners[m]();
        }
        CALLGRIND_DUMP_STATS_AT(label.c_str());
        measurements << (measurements.tellp() > 0 ? ", " : "") << "{\"mode\": \"" << args.modes[m]
                     << "\", \"iters\": " << k << ", \"label\": \"" << label << "\"}";
      }
    }
    CALLGRIND_STOP_INSTRUMENTATION;

    std::cout << "{\"model\": \"" << args.model << "\", \"under_valgrind\": "
              << (RUNNING_ON_VALGRIND ? "true" : "false") << ", \"checks\": [" << checks.str()
              << "], \"measurements\": [" << measurements.str() << "]}\n";
    return 0;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::cerr << "bench_per_op: error: " << what.substr(0, what.find('\n')) << "\n";
    return 1;
  }
}
