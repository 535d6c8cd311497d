#include <lite_predictor/op_profile.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace lightweight_dispatch {

namespace {

using Clock = std::chrono::steady_clock;

// One call being timed. A call may time another inside it (the bind-time stage's kernel that runs at a residual
// add times itself as the conv it computes): the inner call's time counts as its own, not the outer one's.
struct CallStart : at::ObserverContext {
  Clock::time_point start = Clock::now();
  CallStart* outer = nullptr;
  double inner_ms = 0.0;
};

thread_local CallStart* innermost_call = nullptr;

// The callbacks are plain functions (RecordFunction takes function pointers), so the totals live here.
struct OpTotal {
  int64_t calls = 0;
  double ms = 0.0;
};

struct Totals {
  std::mutex mutex;
  std::unordered_map<std::string, OpTotal> by_op;
  bool active = false;
};

Totals& totals() {
  static Totals instance;
  return instance;
}

std::unique_ptr<at::ObserverContext> on_call_start(const at::RecordFunction&) {
  auto call = std::make_unique<CallStart>();
  call->outer = innermost_call;
  innermost_call = call.get();
  return call;
}

void on_call_end(const at::RecordFunction& call, at::ObserverContext* context) {
  auto* started = static_cast<CallStart*>(context);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started->start).count();
  innermost_call = started->outer;
  if (started->outer != nullptr) {
    started->outer->inner_ms += ms;
  }
  Totals& all = totals();
  const std::lock_guard<std::mutex> lock(all.mutex);
  OpTotal& total = all.by_op[call.name()];
  total.calls += 1;
  total.ms += ms - started->inner_ms;
}

} // namespace

OpProfiler::OpProfiler() {
  Totals& all = totals();
  {
    const std::lock_guard<std::mutex> lock(all.mutex);
    if (all.active) {
      throw std::logic_error("an OpProfiler is already active");
    }
    all.active = true;
    all.by_op.clear();
  }
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_call_start, &on_call_end).scopes({at::RecordScope::LITE_INTERPRETER}));
}

OpProfiler::~OpProfiler() {
  at::removeCallback(handle_);
  Totals& all = totals();
  const std::lock_guard<std::mutex> lock(all.mutex);
  all.active = false;
}

std::vector<OpTiming> OpProfiler::timings() const {
  Totals& all = totals();
  std::vector<OpTiming> result;
  {
    const std::lock_guard<std::mutex> lock(all.mutex);
    for (const auto& [name, total] : all.by_op) {
      result.push_back({name, total.calls, total.ms});
    }
  }
  std::sort(result.begin(), result.end(), [](const OpTiming& a, const OpTiming& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.op < b.op;
  });
  return result;
}

} // namespace lightweight_dispatch
