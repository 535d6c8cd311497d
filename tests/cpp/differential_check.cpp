// Differential check of the bind-time stage, through the public API alone (runtime.h, values.h):
//
//   differential_check MODEL.ptl INPUTS.pt [INPUTS.pt ...] [--reference OTHER.ptl] [--threads K]
//
// Loads the model with the stage off (LoadOptions::specialize = false: every call site runs its generated kernel,
// the stock kernels' results) as the reference, and with the stage on under each preparation (Background,
// FirstCall), and runs the inputs files in the order given (several values at one shape, then another shape, ...)
// on each: once from one caller thread on a freshly loaded model, once from K caller threads at once (default 4)
// on another freshly loaded one, so that first calls, preparation and folded values race. Every output of a
// stage run is compared with the reference's on the same input: same count, dtype and shape, strides wherever a
// dimension has more than one element (the stage promises the stock layout to callers), and values within
// 1e-5 + 1e-5 |expected|.
//
// A model whose reference runs on the first input differ draws random numbers: for it, an output is compared by
// whether runs on the same input change it, which must hold for the stage model exactly where it holds for the
// reference (fresh noise on every run, none folded into a constant; no noise of the stage's own). Noise may reach
// an output only sometimes (through a relu, a rare draw), so the reference's rate of change is measured over 10
// runs, the stage's runs are repeated until missing that rate would be a one-in-a-billion chance, an output the
// reference changes in fewer than 30% of its runs is not compared, and one only the stage's runs change counts
// once 40 more reference runs leave it unchanged. Outputs the noise does not reach are compared by value as above.
//
// Every output is overwritten once compared (a caller may write to what it gets), so a tensor the stage hands
// out and still holds (a folded value) shows as a disagreement in the runs after.
//
// Prints one JSON line: {"model", "random", "inputs", "runs", "comparisons", "disagreements", "details": [the
// first few], "error"}. Exit 0 when every comparison agrees, 1 on a disagreement, 2 on a usage error, 3 when a
// model fails to load or the reference run fails (the model itself is at fault, not the stage).
// --reference runs another model as the reference: the harness's own test that it can fail.
#include <lightweight_dispatch/runtime.h>

#include <ATen/ops/equal.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ld = lightweight_dispatch;

namespace {

constexpr double kTolerance = 1e-5;
constexpr size_t kMaxDetails = 5;
// A random model's reference runs on each input, to tell which outputs change from run to run and how often (noise
// can reach an output only sometimes: through a relu, a rare bernoulli draw).
constexpr int kReferenceRuns = 10;
// An output that changed in fewer of those runs is left uncompared: whether the stage's changes too is no evidence.
constexpr double kMinChangeRate = 0.3;
// At most this many stage runs before an output the reference changes counts as noise drawn once.
constexpr int kMaxStageRuns = 60;
// Runs of the reference, at most, before an output only the stage's runs change counts as the stage's own noise.
constexpr int kMoreReferenceRuns = 40;

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// The model failed in a way the stage has no part in: its file, its inputs, or its reference run.
struct ModelFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Counters and the first disagreements, shared by every caller thread.
class Tally {
 public:
  void ran(int64_t n = 1) {
    runs_ += n;
  }
  void compared(int64_t n = 1) {
    comparisons_ += n;
  }
  void disagree(const std::string& where, const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++disagreements_;
    if (details_.size() < kMaxDetails) {
      details_.push_back(where + ": " + what);
    }
  }
  int64_t runs() const {
    return runs_;
  }
  int64_t comparisons() const {
    return comparisons_;
  }
  int64_t disagreements() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return disagreements_;
  }
  std::vector<std::string> details() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return details_;
  }

 private:
  std::atomic<int64_t> runs_{0}, comparisons_{0};
  mutable std::mutex mutex_;
  int64_t disagreements_ = 0;
  std::vector<std::string> details_;
};

// The first stride that differs in a dimension of more than one element, in words; "" if none.
std::string stride_difference(const at::Tensor& actual, const at::Tensor& expected) {
  for (int64_t d = 0; d < expected.dim(); ++d) {
    if (expected.size(d) > 1 && actual.stride(d) != expected.stride(d)) {
      std::ostringstream out;
      out << "strides " << actual.strides() << ", the reference's " << expected.strides();
      return out.str();
    }
  }
  return "";
}

// One output against the reference's: "" when they agree.
std::string difference(const at::Tensor& actual, const at::Tensor& expected) {
  const ld::Comparison c = ld::compare_outputs({actual}, {expected}, kTolerance, kTolerance);
  if (!c.fits) {
    return ld::describe_tensor(actual) + ", the reference's " + ld::describe_tensor(expected);
  }
  if (!c.match) {
    return c.mismatch.empty() ? "max |difference| " + std::to_string(c.max_abs_diff) : c.mismatch;
  }
  return stride_difference(actual, expected);
}

// A dense copy's bytes (NaNs compare equal to themselves this way); clone computes strides afresh, where
// contiguous() keeps the stride of a dimension of size 1.
at::Tensor bytes_of(const at::Tensor& t) {
  return t.clone(at::MemoryFormat::Contiguous).reshape({-1}).view(at::kByte);
}

bool any_difference(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) {
    return true;
  }
  return !at::equal(bytes_of(a), bytes_of(b));
}

bool differs_beyond_twice_the_tolerance(const at::Tensor& a, const at::Tensor& b) {
  return !ld::compare_outputs({a}, {b}, 2 * kTolerance, 2 * kTolerance).match;
}

// What the reference gives for one input: its outputs, and for a random model which outputs change between two
// runs.
struct Expected {
  std::vector<at::Tensor> outputs;
  std::vector<double> change_rate; // random models only: the share of kReferenceRuns that changed each output
};

c10::IValue fresh_copy(const c10::IValue& value) {
  return value.deepcopy(); // a model may write to its inputs: every run gets its own
}

std::vector<c10::IValue> copy_inputs(const std::vector<c10::IValue>& inputs) {
  std::vector<c10::IValue> copy;
  copy.reserve(inputs.size());
  for (const c10::IValue& v : inputs) {
    copy.push_back(fresh_copy(v));
  }
  return copy;
}

std::vector<at::Tensor> run(const ld::Model& model, const std::vector<c10::IValue>& inputs) {
  return ld::flatten_outputs(model.forward(copy_inputs(inputs)));
}

// A caller may do as it likes with what a run returns: once compared, every output is overwritten with NaNs, so
// that a tensor the stage still holds (a folded value handed out uncloned) shows in the runs after. Outputs the
// write does not take (an expanded tensor, an integer one) are left alone.
void scribble_on(const std::vector<at::Tensor>& outputs) {
  c10::InferenceMode guard; // the outputs are inference tensors
  for (const at::Tensor& t : outputs) {
    if (!t.is_floating_point()) {
      continue;
    }
    try {
      t.fill_(std::numeric_limits<double>::quiet_NaN());
    } catch (const std::exception&) {
    }
  }
}

class Check {
 public:
  Check(std::string model_path, std::vector<std::string> input_paths, std::string reference_path, int threads)
      : model_path_(std::move(model_path)),
        input_paths_(std::move(input_paths)),
        reference_path_(std::move(reference_path)),
        threads_(threads) {}

  void run_all() {
    ld::LoadOptions plain;
    plain.specialize = false;
    const ld::Model reference = load(reference_path_, plain);
    for (const std::string& path : input_paths_) {
      try {
        inputs_.push_back(ld::load_inputs(path, reference));
      } catch (const ld::Error& e) {
        throw ModelFault("inputs " + path + ": " + ld::printable_first_line(e.what()));
      }
    }
    reference_ = &reference;
    random_ = reference_runs_differ(reference, inputs_.front());
    for (const auto& inputs : inputs_) {
      expected_.push_back(expect(reference, inputs));
    }
    for (const ld::Preparation preparation : {ld::Preparation::Background, ld::Preparation::FirstCall}) {
      ld::LoadOptions staged;
      staged.preparation = preparation;
      const std::string name = preparation == ld::Preparation::Background ? "background" : "first-call";
      {
        const std::optional<ld::Model> loaded = load_staged(staged, name);
        if (!loaded) {
          continue;
        }
        const ld::Model& model = *loaded;
        for (size_t i = 0; i < inputs_.size(); ++i) {
          // The call that meets a shape (racing its background preparation run), then one after it.
          compare(model, i, name + ", 1 thread, input " + std::to_string(i) + ", first call");
          model.wait_for_kernels();
          compare(model, i, name + ", 1 thread, input " + std::to_string(i) + ", after waiting");
        }
      }
      const std::optional<ld::Model> loaded = load_staged(staged, name);
      if (!loaded) {
        continue;
      }
      const ld::Model& model = *loaded;
      std::vector<std::thread> callers;
      for (int t = 0; t < threads_; ++t) {
        callers.emplace_back([&, t] {
          const std::string caller = name + ", " + std::to_string(threads_) + " threads, thread " + std::to_string(t);
          try {
            for (size_t k = 0; k < inputs_.size(); ++k) {
              const size_t i = (k + static_cast<size_t>(t)) % inputs_.size(); // callers meet shapes in other orders
              compare(model, i, caller + ", input " + std::to_string(i));
            }
          } catch (const std::exception& e) {
            tally_.disagree(caller, std::string("the comparison failed: ") + ld::printable_first_line(e.what()));
          }
        });
      }
      for (std::thread& caller : callers) {
        caller.join();
      }
    }
  }

  void print(const std::string& error) const {
    std::cout << "{\"model\": " << json_string(model_path_) << ", \"random\": " << (random_ ? "true" : "false")
              << ", \"inputs\": " << input_paths_.size() << ", \"runs\": " << tally_.runs()
              << ", \"comparisons\": " << tally_.comparisons() << ", \"disagreements\": " << tally_.disagreements()
              << ", \"details\": [";
    const std::vector<std::string> details = tally_.details();
    for (size_t i = 0; i < details.size(); ++i) {
      std::cout << (i ? ", " : "") << json_string(details[i]);
    }
    std::cout << "], \"error\": " << json_string(error) << "}" << std::endl;
  }

  int64_t disagreements() const {
    return tally_.disagreements();
  }

 private:
  static ld::Model load(const std::string& path, const ld::LoadOptions& options) {
    try {
      return ld::Model::load(path, options);
    } catch (const ld::Error& e) {
      throw ModelFault(path + ": " + ld::printable_first_line(e.what()));
    }
  }

  // The stage model, or nullopt (a disagreement) when it fails to load where the reference loaded.
  std::optional<ld::Model> load_staged(const ld::LoadOptions& options, const std::string& name) {
    try {
      return ld::Model::load(model_path_, options);
    } catch (const ld::Error& e) {
      tally_.disagree(name, "the stage model failed to load: " + ld::printable_first_line(e.what()));
      return std::nullopt;
    }
  }

  std::vector<at::Tensor> run_reference(const ld::Model& reference, const std::vector<c10::IValue>& inputs) {
    try {
      tally_.ran();
      return run(reference, inputs);
    } catch (const ld::Error& e) {
      throw ModelFault("the reference run failed: " + ld::printable_first_line(e.what()));
    }
  }

  // How often each output of the reference changes from its first run's `outputs` in kReferenceRuns more runs.
  std::vector<double> change_rates(
      const ld::Model& reference, const std::vector<c10::IValue>& inputs, const std::vector<at::Tensor>& outputs) {
    std::vector<double> rate(outputs.size(), 0.0);
    for (int r = 0; r < kReferenceRuns; ++r) {
      const std::vector<at::Tensor> again = run_reference(reference, inputs);
      for (size_t i = 0; i < outputs.size(); ++i) {
        rate[i] += (i >= again.size() || any_difference(outputs[i], again[i])) ? 1.0 / kReferenceRuns : 0.0;
      }
    }
    return rate;
  }

  bool reference_runs_differ(const ld::Model& reference, const std::vector<c10::IValue>& inputs) {
    const std::vector<double> rates = change_rates(reference, inputs, run_reference(reference, inputs));
    return std::any_of(rates.begin(), rates.end(), [](double r) { return r > 0; });
  }

  Expected expect(const ld::Model& reference, const std::vector<c10::IValue>& inputs) {
    Expected e;
    e.outputs = run_reference(reference, inputs);
    if (random_) {
      e.change_rate = change_rates(reference, inputs, e.outputs);
    }
    return e;
  }

  // Whether a stage run on input `i` gives output `k` other values than `seen`, within as many runs as make
  // missing the reference's `rate` of change a one-in-a-billion chance (at most kMaxStageRuns).
  bool stage_changes(const ld::Model& model, size_t i, size_t k, const at::Tensor& seen, double rate) {
    const int runs = rate >= 1.0 ? 1 : std::min(kMaxStageRuns, static_cast<int>(std::ceil(-9 * std::log(10.0) /
                                                                                              std::log(1.0 - rate))));
    for (int r = 0; r < runs; ++r) {
      tally_.ran();
      const std::vector<at::Tensor> again = run(model, inputs_[i]);
      if (k >= again.size() || any_difference(seen, again[k])) {
        return true;
      }
    }
    return false;
  }

  // Whether the reference, steady in its kReferenceRuns on input `i`, changes output `k` in up to
  // kMoreReferenceRuns more (a rarely noisy output): then the stage's change is no disagreement.
  bool reference_changes(size_t i, size_t k) {
    const Expected& e = expected_[i];
    for (int r = 0; r < kMoreReferenceRuns; ++r) {
      tally_.ran();
      const std::vector<at::Tensor> again = run(*reference_, inputs_[i]);
      if (k >= again.size() || any_difference(e.outputs[k], again[k])) {
        return true;
      }
    }
    return false;
  }

  // One (random model: two) stage runs of input `i`, compared with the reference's.
  void compare(const ld::Model& model, size_t i, const std::string& where) {
    const Expected& e = expected_[i];
    std::vector<at::Tensor> first, second;
    try {
      tally_.ran();
      first = run(model, inputs_[i]);
      if (random_) {
        tally_.ran();
        second = run(model, inputs_[i]);
      }
    } catch (const std::exception& error) {
      tally_.compared();
      tally_.disagree(where, std::string("the stage model raised, the reference did not: ") +
                                 ld::printable_first_line(error.what()));
      return;
    }
    tally_.compared();
    if (first.size() != e.outputs.size() || (random_ && second.size() != e.outputs.size())) {
      tally_.disagree(where, std::to_string(first.size()) + " outputs, the reference's " +
                                 std::to_string(e.outputs.size()));
      return;
    }
    for (size_t k = 0; k < first.size(); ++k) {
      if (k) {
        tally_.compared();
      }
      const std::string output = where + ", output " + std::to_string(k);
      if (random_ && e.change_rate[k] > 0) {
        if (first[k].scalar_type() != e.outputs[k].scalar_type() || !first[k].sizes().equals(e.outputs[k].sizes())) {
          tally_.disagree(output, ld::describe_tensor(first[k]) + ", the reference's " +
                                      ld::describe_tensor(e.outputs[k]));
        } else if (e.change_rate[k] >= kMinChangeRate && !any_difference(first[k], second[k]) &&
                   !stage_changes(model, i, k, first[k], e.change_rate[k])) {
          tally_.disagree(output, "runs on the same input gave the same values, the reference's differ in " +
                                      std::to_string(static_cast<int>(e.change_rate[k] * 100)) +
                                      "% of its runs (its noise is drawn once, not on every run)");
        }
        continue;
      }
      // Each of the stage's runs is within the tolerance of the reference's one value: two of them may differ by
      // twice that (a relu's near-zero input rounding either way lets the noise through) without a change.
      if (random_ && differs_beyond_twice_the_tolerance(first[k], second[k]) && !reference_changes(i, k)) {
        tally_.disagree(output, "two runs on the same input differ; the reference's agree in " +
                                    std::to_string(kReferenceRuns + kMoreReferenceRuns) + " runs");
        continue;
      }
      const std::string what = difference(first[k], e.outputs[k]);
      if (!what.empty()) {
        tally_.disagree(output, what);
      }
    }
    scribble_on(first);
    scribble_on(second);
  }

  std::string model_path_;
  std::vector<std::string> input_paths_;
  std::string reference_path_;
  int threads_;
  std::vector<std::vector<c10::IValue>> inputs_;
  std::vector<Expected> expected_;
  bool random_ = false;
  const ld::Model* reference_ = nullptr; // while run_all runs
  Tally tally_;
};

int usage(const std::string& problem) {
  std::cerr << "differential_check: " << problem << "\n"
            << "usage: differential_check MODEL.ptl INPUTS.pt [INPUTS.pt ...] [--reference OTHER.ptl] [--threads K]\n";
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  std::string model;
  std::string reference;
  std::vector<std::string> inputs;
  int threads = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--reference" || arg == "--threads") && i + 1 >= argc) {
      return usage(arg + " needs a value");
    }
    if (arg == "--reference") {
      reference = argv[++i];
    } else if (arg == "--threads") {
      threads = std::atoi(argv[++i]);
      if (threads < 1) {
        return usage("--threads needs a positive number");
      }
    } else if (model.empty()) {
      model = arg;
    } else {
      inputs.push_back(arg);
    }
  }
  if (model.empty() || inputs.empty()) {
    return usage("a model and at least one inputs file are needed");
  }
  Check check(model, inputs, reference.empty() ? model : reference, threads);
  try {
    check.run_all();
  } catch (const ModelFault& fault) {
    check.print(fault.what());
    return 3;
  } catch (const std::exception& e) {
    check.print(std::string("unexpected: ") + ld::printable_first_line(e.what()));
    return 3;
  }
  check.print("");
  return check.disagreements() == 0 ? 0 : 1;
}
