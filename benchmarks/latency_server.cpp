// bench_latency_server: holds lite-interpreter models loaded under static and dynamic dispatch in one
// process and runs them on request, so benchmarks/latency.py can interleave them with Python eager and
// the Python lite interpreter run for run. Times are taken here, around the forward pass only.
//
// One command per line on stdin, one reply per line on stdout:
//   load KEY MODE MODEL.ptl INPUTS.pt [ATOL]
//                                       -> "ok LOAD_MS"   (MODE static, static_plain, static_auto or dynamic;
//                                                        static includes binding; MODEL.expected.pt must lie
//                                                        beside; ATOL: the check's absolute tolerance, for
//                                                        static_auto's outputs a quantization step or two away)
//   run KEY                             -> "ok MS"
//   compiled KEY                        -> "ok COMPILED RAN" (the stage's sites that ran, and of them those
//                                                        running their compiled kernel)
//   quit
// Any failure replies "error MESSAGE" and the server keeps serving. A key's first run is checked against
// MODEL.expected.pt (eager PyTorch's outputs, written by scripts/dump_ops.py) within 1e-4 + 1e-4 x |expected|, as
// the Python servers check theirs (latency_protocol.py): a mismatch replies "error OutputMismatch: ..." and drops
// the key, so a mode that computes something else is reported as failed rather than timed.
#include <benchmarks/bench_model.h>
#include <lightweight_dispatch/values.h>

#include <ATen/Parallel.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

namespace ld = lightweight_dispatch;
namespace bench = lightweight_dispatch::bench;

namespace {

constexpr const char* kUsage = R"(usage: bench_latency_server [--threads T]

Reads commands from stdin (see benchmarks/latency_server.cpp): load KEY MODE MODEL.ptl INPUTS.pt,
run KEY, compiled KEY, quit. Replies "ok VALUE..." or "error MESSAGE", one line each. --threads sets LibTorch's
intra-op threads for the whole process (default: LibTorch's choice).
)";

using Clock = std::chrono::steady_clock;

// latency_protocol.py's ATOL and RTOL.
constexpr double kAtol = 1e-4;
constexpr double kRtol = 1e-4;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Loaded {
  std::unique_ptr<ld::Model> model;
  std::vector<c10::IValue> inputs;
  std::vector<at::Tensor> expected; // MODEL.expected.pt
  double atol = 0;                  // the check's absolute tolerance
  bool checked = false;             // its first run's outputs were compared with `expected`
};

// MODEL.ptl -> MODEL.expected.pt beside it.
std::string expected_path(const std::string& model_path) {
  const std::filesystem::path path(model_path);
  return (path.parent_path() / (path.stem().string() + ".expected.pt")).string();
}

// The bind-time stage's sites that ran, and of them those whose calls ran the compiled kernel more often than the
// generated ones (after the rounds: a site whose race the generated kernels won runs them on every call); under
// static_auto, quantized calls count too, "compiled" where another engine than the loaded one served most calls.
struct CompiledSites {
  int compiled = 0;
  int ran = 0;
};

CompiledSites compiled_sites(const ld::Model& model) {
  int ran = 0, compiled = 0;
  for (const ld::SpecializedCallSite& site : model.specialized_sites()) {
    if (site.specialized_calls + site.generated_calls > 0) {
      ++ran;
      compiled += site.specialized_calls > site.generated_calls ? 1 : 0;
    }
  }
  for (const ld::QuantizedEngineCallSite& call : model.quantized_engine_calls()) {
    int64_t total = 0, loaded = call.calls.empty() ? 0 : call.calls.front();
    for (const int64_t calls : call.calls) {
      total += calls;
    }
    if (total > 0) {
      ++ran;
      compiled += total - loaded > loaded ? 1 : 0;
    }
  }
  return {compiled, ran};
}

class Server {
 public:
  std::string handle(const std::string& line) {
    std::istringstream words(line);
    std::string command;
    words >> command;
    if (command == "load") {
      std::string key, mode, model_path, inputs_path;
      double atol = kAtol;
      words >> key >> mode >> model_path >> inputs_path;
      if (inputs_path.empty()) {
        return "error load expects KEY MODE MODEL.ptl INPUTS.pt [ATOL]";
      }
      if (!words.eof() && !(words >> atol)) {
        return "error load: ATOL is not a number";
      }
      loaded_.erase(key);
      const auto start = Clock::now();
      auto model = bench::load_model(model_path, bench::parse_mode(mode));
      const double load_ms = ms_since(start);
      std::vector<at::Tensor> expected = ld::load_tensor_list(expected_path(model_path));
      loaded_.insert_or_assign(
          key, Loaded{std::move(model), bench::as_ivalues(ld::load_tensor_list(inputs_path)), std::move(expected), atol});
      return "ok " + std::to_string(load_ms);
    }
    if (command == "run") {
      std::string key;
      words >> key;
      const auto it = loaded_.find(key);
      if (it == loaded_.end()) {
        return "error nothing loaded under '" + key + "'";
      }
      Loaded& loaded = it->second;
      const auto start = Clock::now();
      const c10::IValue output = bench::run_once(*loaded.model, loaded.inputs);
      const double run_ms = ms_since(start);
      if (!loaded.checked) { // not timed
        const ld::Comparison comparison =
            ld::compare_outputs(ld::flatten_outputs(output), loaded.expected, loaded.atol, kRtol);
        if (!comparison.match) {
          loaded_.erase(it);
          return "error OutputMismatch: " + comparison.mismatch.substr(0, comparison.mismatch.find('\n'));
        }
        loaded.checked = true;
      }
      return "ok " + std::to_string(run_ms);
    }
    if (command == "compiled") {
      std::string key;
      words >> key;
      const auto it = loaded_.find(key);
      if (it == loaded_.end()) {
        return "error nothing loaded under '" + key + "'";
      }
      const CompiledSites sites = compiled_sites(*it->second.model);
      return "ok " + std::to_string(sites.compiled) + " " + std::to_string(sites.ran);
    }
    return "error unknown command '" + command + "' (load, run, compiled, quit)";
  }

 private:
  std::map<std::string, Loaded> loaded_;
};

} // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      at::set_num_threads(std::stoi(argv[++i]));
    } else {
      std::cerr << kUsage;
      return arg == "-h" || arg == "--help" ? 0 : 2;
    }
  }
  Server server;
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "quit") {
      break;
    }
    std::string reply;
    try {
      reply = server.handle(line);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      reply = "error " + what.substr(0, what.find('\n'));
    }
    std::cout << reply << std::endl; // flushed: the client waits for each reply
  }
  return 0;
}
