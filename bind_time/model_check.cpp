#include <bind_time/model_check.h>

#include <bind_time/test_hooks.h>
#include <runtime/tensor_tree.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <sstream>

namespace lightweight_dispatch {

namespace {

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n == 0 ? 0 : (n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2);
}

void describe_value(std::ostream& out, const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined()) {
      out << "undefined";
      return;
    }
    out << c10::toString(t.scalar_type()) << t.sizes();
    if (!t.is_contiguous()) {
      out << (t.dim() == 4 && t.is_contiguous(c10::MemoryFormat::ChannelsLast) ? " channels_last"
                                                                               : " strides" + c10::str(t.strides()));
    }
  } else if (value.isList()) {
    out << "[";
    const c10::List<c10::IValue> list = value.toList();
    for (size_t i = 0; i < list.size(); ++i) {
      out << (i == 0 ? "" : ", ");
      describe_value(out, list.get(i));
    }
    out << "]";
  } else if (value.isTuple()) {
    out << "(";
    const auto& elements = value.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); ++i) {
      out << (i == 0 ? "" : ", ");
      describe_value(out, elements[i]);
    }
    out << ")";
  } else if (value.isGenericDict()) {
    out << "{";
    bool first = true;
    for (const auto& entry : value.toGenericDict()) {
      out << (first ? "" : ", ");
      first = false;
      describe_value(out, entry.key());
      out << ": ";
      describe_value(out, entry.value());
    }
    out << "}";
  } else if (value.isString()) {
    out << '"' << value.toStringRef() << '"';
  } else if (value.isDouble()) {
    out << "float";
  } else {
    out << value; // a number, a bool, None
  }
}

// The verdict a test asks for (test_hooks.h), else nullopt.
std::optional<bool> verdict_a_test_asks_for() {
  const std::string asked = test_hook_value("LIGHTWEIGHT_DISPATCH_TEST_ONLY_MODEL_CHECK");
  if (asked == "with_compiled") {
    return true;
  }
  if (asked == "without_compiled") {
    return false;
  }
  return std::nullopt;
}

} // namespace

PairsVerdict judge_pairs(const std::vector<TimedPair>& pairs) {
  PairsVerdict verdict;
  if (pairs.empty()) {
    return verdict;
  }
  std::vector<double> with, without, ratios;
  bool all_clearly_with = true, all_clearly_without = true;
  for (const TimedPair& pair : pairs) {
    with.push_back(pair.with_compiled_ms);
    without.push_back(pair.without_compiled_ms);
    const double ratio = pair.with_compiled_ms / pair.without_compiled_ms;
    ratios.push_back(ratio);
    all_clearly_with = all_clearly_with && ratio * kModelCheckClearly < 1.0;
    all_clearly_without = all_clearly_without && ratio > kModelCheckClearly;
  }
  verdict.with_compiled_ms = median_of(with);
  verdict.without_compiled_ms = median_of(without);
  verdict.median_ratio = median_of(ratios);
  verdict.keep_compiled = verdict.median_ratio * kModelCheckMargin < 1.0;
  const int count = static_cast<int>(pairs.size());
  verdict.settled = count >= kModelCheckMaxPairs ||
                    (count >= kModelCheckMinPairs && (all_clearly_with || all_clearly_without));
  return verdict;
}

std::string inputs_kind(const std::string& method, const std::vector<c10::IValue>& inputs) {
  std::ostringstream out;
  out << method << "(";
  for (size_t i = 0; i < inputs.size(); ++i) {
    out << (i == 0 ? "" : ", ");
    describe_value(out, inputs[i]);
  }
  out << ")";
  return out.str();
}

ModelCheck::ModelCheck(std::string not_run_because) : not_run_because_(std::move(not_run_because)) {
  if (not_run_because_.empty() && test_asks_for_no_race() && !verdict_a_test_asks_for()) {
    not_run_because_ = "the test hook LIGHTWEIGHT_DISPATCH_TEST_ONLY_NO_RACE keeps every timed rewrite untimed";
  }
}

ModelCheck::Plan ModelCheck::plan(const std::string& kind) const {
  if (!not_run_because_.empty()) {
    return {};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = verdicts_.find(kind);
  if (found != verdicts_.end()) {
    return {found->second.compiled_kept, false};
  }
  return {true, verdicts_.size() < kModelCheckMaxKinds};
}

void ModelCheck::after_callers_run(const std::string& kind, const std::string& method,
    const std::vector<c10::IValue>& inputs, const RunActivity& activity, bool alone, const ComparisonRun& run) {
  if (!activity.decided && activity.compiled_calls == 0) {
    // Settled with every site on its generated kernels (every race lost): nothing to compare, and no need to keep
    // copying these inputs.
    std::lock_guard<std::mutex> lock(mutex_);
    if (verdicts_.count(kind) == 0 && verdicts_.size() < kModelCheckMaxKinds) {
      ModelCheckOfInputs nothing;
      nothing.inputs = kind;
      nothing.note = "no site ran a compiled kernel: nothing to compare";
      verdicts_.emplace(kind, std::move(nothing));
    }
    return;
  }
  if (activity.decided || !alone) {
    return; // not settled yet, or timed beside another run
  }
  std::unique_lock<std::mutex> one_check(checking_, std::try_to_lock);
  if (!one_check.owns_lock()) {
    return; // another caller's thread is checking
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (verdicts_.count(kind) != 0 || verdicts_.size() >= kModelCheckMaxKinds) {
      return;
    }
  }
  ModelCheckOfInputs checked = compare(kind, method, inputs, activity.compiled_calls, run);
  std::lock_guard<std::mutex> lock(mutex_);
  verdicts_.emplace(kind, std::move(checked));
}

ModelCheckOfInputs ModelCheck::compare(const std::string& kind, const std::string& method,
    const std::vector<c10::IValue>& inputs, int64_t compiled_calls, const ComparisonRun& run) const {
  ModelCheckOfInputs checked;
  checked.inputs = kind;
  // One timed run; an empty string if it repeated the settled run, else why not.
  const auto timed_run = [&](bool compiled_kernels, double& ms) -> std::string {
    std::vector<c10::IValue> copy = deep_copies(inputs);
    const auto start = std::chrono::steady_clock::now();
    const RunActivity activity = run(method, std::move(copy), compiled_kernels);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (activity.decided) {
      return "a comparison run decided something the caller's settled run had not (a shape met anew)";
    }
    const int64_t expected = compiled_kernels ? compiled_calls : 0;
    if (activity.compiled_calls != expected) {
      return "a comparison run made " + std::to_string(activity.compiled_calls) + " compiled calls where " +
             std::to_string(expected) + " were expected";
    }
    return "";
  };
  std::vector<TimedPair> pairs;
  PairsVerdict verdict;
  try {
    // One untimed run each way first: a kernel's first call at a layout it has not met creates and JITs its
    // oneDNN primitive (the SSD head's convs, contiguous: 3.5 ms a run against 0.2 after).
    for (const bool compiled_kernels : {true, false}) {
      double ms = 0;
      const std::string why_not = timed_run(compiled_kernels, ms);
      if (!why_not.empty()) {
        checked.note = why_not;
        return checked; // the compiled kernels stay, as raced
      }
    }
    while (!verdict.settled) {
      TimedPair pair;
      const bool with_first = pairs.size() % 2 == 0; // alternate, so that neither side always runs first
      for (const bool compiled_kernels : {with_first, !with_first}) {
        double& ms = compiled_kernels ? pair.with_compiled_ms : pair.without_compiled_ms;
        const std::string why_not = timed_run(compiled_kernels, ms);
        if (!why_not.empty()) {
          checked.note = why_not;
          checked.pairs = static_cast<int>(pairs.size());
          return checked; // the compiled kernels stay, as raced
        }
      }
      pairs.push_back(pair);
      verdict = judge_pairs(pairs);
    }
  } catch (const std::exception& e) {
    const std::string what = e.what();
    checked.note = "a comparison run failed: " + what.substr(0, what.find('\n'));
    checked.pairs = static_cast<int>(pairs.size());
    return checked;
  }
  checked.compared = true;
  checked.pairs = static_cast<int>(pairs.size());
  checked.with_compiled_ms = verdict.with_compiled_ms;
  checked.without_compiled_ms = verdict.without_compiled_ms;
  checked.median_ratio = verdict.median_ratio;
  checked.compiled_kept = verdict_a_test_asks_for().value_or(verdict.keep_compiled);
  return checked;
}

ModelCheckReport ModelCheck::report() const {
  ModelCheckReport report;
  report.not_run_because = not_run_because_;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& entry : verdicts_) {
    report.checks.push_back(entry.second);
  }
  return report;
}

} // namespace lightweight_dispatch
