// max_pool2d in the layout LibTorch runs it fast in. Its kernel on a contiguous (NCHW) float tensor loops over one
// plane at a time; on a channels_last tensor it is vectorised over channels: ResNet-18's 1x64x112x112 pool, 3x3
// stride 2, takes 4.1 ms one way and 0.3 ms the other at 1 thread, 14% of the stock run.
//
// Every max_pool2d call site is re-bound to a kernel that, for a contiguous 4-d float input, runs the generated
// kernel on a channels_last copy of the input and gives the result back contiguous, as the stock kernel returns
// it, where that is faster: decided for each input shape on the first call that meets it, by timing both on that
// call's input (with background preparation, the first call in the preparation run: a caller's call before it
// takes, untimed, the layout that is usually faster for its map, channels_last from 8 channels on a 32x32 map).
// Max pooling returns one of the input elements of each window, and both kernels keep the first of equal values
// (a NaN wins), scanning the window in the same order, so the values are the stock kernel's, bit for bit; any
// other input (channels_last already, 3-d, another dtype) runs the generated kernel.
#pragma once

#include <lightweight_dispatch/bind_time_report.h>
#include <runtime/op_binding.h>

#include <ATen/core/stack.h>
#include <torch/csrc/jit/mobile/code.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// What a layout kernel counts: its calls run channels_last, and those run as the stock kernels would.
class LayoutKernelCounts {
 public:
  int64_t channels_last_calls() const {
    return channels_last_calls_;
  }
  int64_t stock_calls() const {
    return stock_calls_;
  }

 protected:
  mutable std::atomic<int64_t> channels_last_calls_{0}, stock_calls_{0};
};

class MaxPoolLayoutKernel : public LayoutKernelCounts {
 public:
  // `from_channels_last_site`: the input is computed from a site's result that the stage gives channels_last, where
  // the stock kernels give it contiguous (in a run given stock-layout inputs), and the pool's result, like that
  // site's, reaches only other sites and layout-following operations (weight_sites.h): a channels_last input is
  // then pooled as it is and its result left channels_last.
  MaxPoolLayoutKernel(std::function<void(torch::jit::Stack&)> generated, size_t inputs, bool from_channels_last_site)
      : generated_(std::move(generated)), inputs_(inputs), from_channels_last_site_(from_channels_last_site) {}

  void operator()(torch::jit::Stack& stack) const;

 private:
  // Runs on a channels_last copy, gives the result back contiguous.
  void run_channels_last(torch::jit::Stack& stack, size_t input_at) const;
  // Whether channels_last was found faster for this input's sizes, if they were timed.
  std::optional<bool> decided(const at::Tensor& input) const;
  // True the first time these sizes are met undecided (the preparation run that follows decides them); false after,
  // when that run did not meet them as the caller does (the caller's call decides them then).
  bool defer_once(const at::Tensor& input) const;
  bool decide(const torch::jit::Stack& stack, size_t input_at) const;

  std::function<void(torch::jit::Stack&)> generated_;
  size_t inputs_;
  bool from_channels_last_site_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<int64_t>, bool> channels_last_for_; // per input sizes: faster channels_last
  mutable std::set<std::vector<int64_t>> deferred_; // input sizes whose timing was left to a preparation run
};

// The max_pool2d OP instructions of `code`.
std::vector<size_t> find_max_pool_calls(const torch::jit::mobile::Code& code);

// adaptive_avg_pool2d on a map a site made channels_last (a squeeze-excitation block's pooling of a depthwise
// conv's result, which also goes on to the block's product and the next conv). LibTorch's kernel sums a window
// in another order on a channels_last tensor than on a contiguous one, so the two results may differ in their
// last bits (measured: up to 1.2e-7 on a 1152-channel 7x7 map). So the channels_last input is pooled as it is
// only for an input shape where, on its first call, the result agrees with the contiguous input's within the
// stage's tolerance (result_check.h), on that call's own tensor and on a probe; otherwise every call of that
// shape pools a contiguous copy, as the stock kernels would. Any other input (the caller's own channels_last
// tensors included: the stock kernels see them too) runs the generated kernel as it is.
class AvgPoolLayoutKernel : public LayoutKernelCounts {
 public:
  AvgPoolLayoutKernel(std::function<void(torch::jit::Stack&)> generated, size_t inputs)
      : generated_(std::move(generated)), inputs_(inputs) {}

  void operator()(torch::jit::Stack& stack) const;

 private:
  bool agrees(const torch::jit::Stack& stack, size_t input_at) const;

  std::function<void(torch::jit::Stack&)> generated_;
  size_t inputs_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<int64_t>, bool> channels_last_for_; // per input sizes: the results agree
};

// The adaptive_avg_pool2d OP instructions of `code`.
std::vector<size_t> find_adaptive_avg_pool_calls(const torch::jit::mobile::Code& code);

} // namespace lightweight_dispatch
