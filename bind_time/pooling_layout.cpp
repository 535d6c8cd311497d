#include <bind_time/pooling_layout.h>

#include <bind_time/preparation_run.h>
#include <bind_time/race.h>
#include <bind_time/result_check.h>
#include <bind_time/test_hooks.h>

#include <c10/core/MemoryFormat.h>
#include <torch/csrc/jit/runtime/instruction.h>

#include <chrono>

namespace lightweight_dispatch {

namespace {

bool is_contiguous_float_map(const c10::IValue& value) {
  if (!value.isTensor()) {
    return false;
  }
  const at::Tensor& t = value.toTensor();
  return t.dim() == 4 && t.scalar_type() == at::kFloat && t.layout() == at::kStrided && t.device().is_cpu() &&
         !t.is_quantized() && t.is_contiguous() && !t.is_contiguous(c10::MemoryFormat::ChannelsLast) && t.numel() > 0;
}

bool is_channels_last_float_map(const c10::IValue& value) {
  if (!value.isTensor()) {
    return false;
  }
  const at::Tensor& t = value.toTensor();
  return t.dim() == 4 && t.scalar_type() == at::kFloat && !t.is_contiguous() &&
         t.is_contiguous(c10::MemoryFormat::ChannelsLast);
}

// The OP instructions of `code` calling `op`.
std::vector<size_t> calls_of(const torch::jit::mobile::Code& code, const std::string& op) {
  std::vector<size_t> calls;
  for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
    const auto& inst = code.instructions_[pc];
    if (inst.op == torch::jit::OP && op_display_name(code.op_names_[static_cast<size_t>(inst.X)]) == op) {
      calls.push_back(pc);
    }
  }
  return calls;
}

// A pool's input for which the channels_last copy is the faster way before any timing says so: 8 channels or more
// (a vector of them) on a map of 32x32 or more. Measured at 1 thread, a 3x3 stride-2 pool with its two copies:
// 1x24x112x112 3.8 -> 1.2 ms, 1x64x112x112 9.4 -> 2.4, 1x8x112x112 1.26 -> 0.52; 3 or 4 channels, or an 8x8
// map, as fast or slower.
bool likely_faster_channels_last(const at::Tensor& input) {
  return input.size(1) >= 8 && input.size(2) * input.size(3) >= 32 * 32;
}

} // namespace

void MaxPoolLayoutKernel::operator()(torch::jit::Stack& stack) const {
  const size_t input_at = stack.size() - inputs_;
  if (from_channels_last_site_ && is_channels_last_float_map(stack[input_at]) && run_inputs_stock_layout()) {
    ++channels_last_calls_;
    generated_(stack); // its result stays channels_last: only sites and layout-following operations see it
    return;
  }
  if (!is_contiguous_float_map(stack[input_at])) {
    ++stock_calls_;
    generated_(stack);
    return;
  }
  const std::optional<bool> channels_last = decided(stack[input_at].toTensor());
  if (!channels_last && in_comparison_run()) {
    ++stock_calls_; // a model check's run without the compiled kernels (model_check.h): as without the stage
    generated_(stack);
    return;
  }
  if (!channels_last) {
    note_stage_decision(); // timed now or in the preparation run
  }
  if (!channels_last && preparation_run_follows() && defer_once(stack[input_at].toTensor())) {
    note_unprepared_shape(); // timed in the preparation run, not on this caller's call
    // Untimed, this call takes the layout that is faster for a map like it (the values are the same either way).
    if (likely_faster_channels_last(stack[input_at].toTensor())) {
      ++channels_last_calls_;
      run_channels_last(stack, input_at);
    } else {
      ++stock_calls_;
      generated_(stack);
    }
    return;
  }
  if (channels_last ? *channels_last : decide(stack, input_at)) {
    ++channels_last_calls_;
    run_channels_last(stack, input_at);
  } else {
    ++stock_calls_;
    generated_(stack);
  }
}

bool MaxPoolLayoutKernel::defer_once(const at::Tensor& input) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return deferred_.insert(input.sizes().vec()).second;
}

std::optional<bool> MaxPoolLayoutKernel::decided(const at::Tensor& input) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = channels_last_for_.find(input.sizes().vec());
  return found == channels_last_for_.end() ? std::nullopt : std::optional<bool>(found->second);
}

void MaxPoolLayoutKernel::run_channels_last(torch::jit::Stack& stack, size_t input_at) const {
  stack[input_at] = stack[input_at].toTensor().contiguous(c10::MemoryFormat::ChannelsLast);
  generated_(stack);
  stack.back() = stack.back().toTensor().contiguous();
}

bool MaxPoolLayoutKernel::decide(const torch::jit::Stack& stack, size_t input_at) const {
  const std::vector<int64_t> sizes = stack[input_at].toTensor().sizes().vec();
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto found = channels_last_for_.find(sizes); found != channels_last_for_.end()) {
    return found->second;
  }
  if (test_asks_for_no_race()) {
    channels_last_for_.emplace(sizes, true);
    return true; // the same values either way (test_hooks.h)
  }
  // Twice each, the faster of the two: the first call of either also warms its code and the allocator.
  const torch::jit::Stack arguments(stack.begin() + static_cast<std::ptrdiff_t>(input_at), stack.end());
  double stock = 1e300, channels_last = 1e300;
  for (int round = 0; round < 2; ++round) {
    stock = std::min(stock, ms_of([&] {
      torch::jit::Stack copy = arguments;
      generated_(copy);
    }));
    channels_last = std::min(channels_last, ms_of([&] {
      torch::jit::Stack copy = arguments;
      run_channels_last(copy, 0);
    }));
  }
  const bool faster = channels_last < stock;
  channels_last_for_.emplace(sizes, faster);
  return faster;
}

void AvgPoolLayoutKernel::operator()(torch::jit::Stack& stack) const {
  const size_t input_at = stack.size() - inputs_;
  if (!is_channels_last_float_map(stack[input_at]) || !run_inputs_stock_layout()) {
    ++stock_calls_;
    generated_(stack);
    return;
  }
  if (agrees(stack, input_at)) {
    ++channels_last_calls_;
  } else {
    ++stock_calls_;
    stack[input_at] = stack[input_at].toTensor().contiguous();
  }
  generated_(stack);
}

bool AvgPoolLayoutKernel::agrees(const torch::jit::Stack& stack, size_t input_at) const {
  const at::Tensor& input = stack[input_at].toTensor();
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto found = channels_last_for_.find(input.sizes().vec()); found != channels_last_for_.end()) {
    return found->second;
  }
  note_stage_decision();
  const torch::jit::Stack arguments(stack.begin() + static_cast<std::ptrdiff_t>(input_at), stack.end());
  const auto agrees_on = [&](const at::Tensor& map) {
    torch::jit::Stack as_given = arguments, contiguous = arguments;
    as_given[0] = map;
    contiguous[0] = map.contiguous();
    generated_(as_given);
    generated_(contiguous);
    at::Tensor expected = contiguous.back().toTensor();
    return agrees_within_tolerance(as_given.back().toTensor(), expected);
  };
  const bool agreed = agrees_on(input) && agrees_on(probe_like(input));
  channels_last_for_.emplace(input.sizes().vec(), agreed);
  return agreed;
}

std::vector<size_t> find_adaptive_avg_pool_calls(const torch::jit::mobile::Code& code) {
  return calls_of(code, "aten::adaptive_avg_pool2d");
}

std::vector<size_t> find_max_pool_calls(const torch::jit::mobile::Code& code) {
  return calls_of(code, "aten::max_pool2d");
}

} // namespace lightweight_dispatch
