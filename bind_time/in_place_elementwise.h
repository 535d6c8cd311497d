// An out-of-place product or sum written into an operand that nothing else holds at that call.
//
// `s * x` (a squeeze-excitation block's scale times its map) allocates a fresh result the size of x and fills it:
// three streams of memory where the in-place overload, writing into x, needs two (EfficientNet-B0's 16 such calls
// take about half the time in place). The values are the same: each element is the same one IEEE operation, in the
// same kernel, either way. What must hold for no one to tell the difference, checked on every call:
// - the operand written into is the only reference to its tensor and its storage (the interpreter MOVEd it out of
//   its register at its last use; a caller's input, a module attribute, a folded value or a view all add a
//   reference), and its memory comes from LibTorch's allocator (not a caller's buffer under from_blob);
// - it has the result's sizes (the other operand broadcasts into it), both are float32 CPU tensors (no type
//   promotion), and it is dense;
// - the result the out-of-place kernel gives for these sizes and strides has its strides: checked once per
//   shape by running both kernels and comparing strides and every bit; on a preparation run's call where a
//   background preparation run follows the caller's (preparation_run.h), else on the shape's first call. Until it
//   is checked, a call allocates, as the stock kernel does.
// Products may be written into either operand (`s * x` into x); a sum into its second only with alpha 1.
#pragma once

#include <ATen/core/stack.h>
#include <torch/csrc/jit/mobile/code.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace lightweight_dispatch {

using BoxedKernel = void (*)(torch::jit::Stack& stack);
// The generated kernel of an operator ("aten::mul_.Tensor"), or null if the build has none.
using GeneratedKernelOf = std::function<BoxedKernel(const std::string& op_name)>;

enum class ElementwiseOp { Add, Mul };

// The in-place overload the stage calls for an out-of-place operator ("aten::mul_.Tensor" for "aten::mul.Tensor"),
// or "" for one it does not rewrite. tools/stage_companions.py generates the same list.
std::string in_place_overload_of(const std::string& op_name);

class InPlaceElementwiseKernel {
 public:
  // `generated`: the call site's bound kernel (`inputs` arguments given); `in_place`: the generated kernel of the
  // in-place overload, called with every argument of its schema.
  InPlaceElementwiseKernel(
      ElementwiseOp op, std::function<void(torch::jit::Stack&)> generated, BoxedKernel in_place, size_t inputs)
      : op_(op), generated_(std::move(generated)), in_place_(in_place), inputs_(inputs) {}

  void operator()(torch::jit::Stack& stack) const;

  // Calls of callers' runs (not of preparation or comparison runs), in place and allocating.
  int64_t in_place_calls() const {
    return in_place_calls_;
  }
  int64_t allocating_calls() const {
    return allocating_calls_;
  }

 private:
  // The argument (0 or 1) this call may write into, or -1.
  int writable_operand(const torch::jit::Stack& stack, size_t first) const;
  // Whether, for these operands' sizes and strides, both kernels give the same strides and bits (once per shape).
  bool shape_agrees(const torch::jit::Stack& stack, size_t first, int target) const;
  void run_in_place(torch::jit::Stack& stack, size_t first, int target) const;

  ElementwiseOp op_;
  std::function<void(torch::jit::Stack&)> generated_;
  BoxedKernel in_place_;
  size_t inputs_;
  mutable std::atomic<int64_t> in_place_calls_{0}, allocating_calls_{0};
  mutable std::mutex mutex_;
  mutable std::map<std::vector<int64_t>, bool> agrees_for_; // per (target, sizes and strides of both)
  mutable std::set<std::vector<int64_t>> deferred_;          // shapes a caller's call left to the preparation run
};

// The OP instructions of `code` calling an operator in_place_overload_of knows.
std::vector<size_t> find_in_place_candidates(const torch::jit::mobile::Code& code);

} // namespace lightweight_dispatch
