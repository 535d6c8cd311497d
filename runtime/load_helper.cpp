#include <runtime/load_helper.h>

#include <torch/csrc/jit/runtime/operator.h>

#include <chrono>
#include <system_error>

namespace lightweight_dispatch {

namespace {

// How long the helper waits for the heap to grow before it looks again.
constexpr auto kCaughtUpWait = std::chrono::microseconds(250);

} // namespace

LoadHelper::LoadHelper(size_t prefault_budget) : prefault_(prefault_budget), prefault_wanted_(prefault_budget > 0) {
  try {
    thread_ = std::thread([this] { work(); });
  } catch (const std::system_error&) {
    // no thread: the loader warms the registry itself, and no page is faulted in ahead
  }
}

LoadHelper::~LoadHelper() {
  finish();
}

void LoadHelper::release(CheckedModelFile file) {
  if (!thread_.joinable()) {
    return; // `file` is unmapped here, on return
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    to_release_.emplace(std::move(file));
  }
  woken_.notify_all();
}

size_t LoadHelper::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  woken_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
  return prefault_.populated_bytes();
}

void LoadHelper::work() {
  try {
    torch::jit::findOperatorFor(c10::OperatorName("aten::add", "Tensor"));
  } catch (const std::exception&) {
    // the loader's own lookup meets the same error and reports it
  }
  bool prefaulting = prefault_wanted_;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (to_release_) {
      std::optional<CheckedModelFile> file = std::move(to_release_);
      to_release_.reset();
      lock.unlock();
      file.reset(); // unmapped here, outside the lock
      lock.lock();
      continue;
    }
    if (stop_) {
      return;
    }
    HeapPrefault::Step step = HeapPrefault::Step::Done;
    if (prefaulting) {
      lock.unlock();
      step = prefault_.step();
      lock.lock();
      prefaulting = step != HeapPrefault::Step::Done;
    }
    if (step == HeapPrefault::Step::Faulted) {
      continue;
    }
    const auto woken = [this] { return stop_ || to_release_.has_value(); };
    if (prefaulting) {
      woken_.wait_for(lock, kCaughtUpWait, woken);
    } else {
      woken_.wait(lock, woken);
    }
  }
}

} // namespace lightweight_dispatch
