// Calls whose results depend only on constants and input shapes (an SSD head's anchors: aranges over the feature
// maps' sizes, scaled, stacked, concatenated), computed once per input shape instead of on every run.
//
// A symbolic run of a function's bytecode (up to its first jump or call) marks every value as fixed (a constant,
// a size, dim or numel of any tensor, or the result of a deterministic operator of fixed values: operator_facts.h)
// or not. Each call
// of an operator that returns tensors from fixed values only is re-bound to a kernel that remembers its last inputs
// and results: called with the same inputs again (numbers and lists by value, tensors by identity, which holds
// because fixed tensors are constants or such remembered results), it pushes the remembered results; otherwise it
// calls the operator. The remembered tensors are handed out again, so nothing may write to them: a function that
// writes (an in-place or out= operator) to a fixed tensor or anything that may share its memory, or that makes
// any tensor write or call another function past the traced part, folds nothing; what a run returns is cloned
// where it shares memory with a result a folded call handed to that run (protect_from_handed_out), so callers may
// do as they like with it.
#pragma once

#include <runtime/op_binding.h>

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <torch/csrc/jit/mobile/code.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// The OP instructions of `code` that can be folded (none if the function cannot be proven safe); `skipped`:
// instructions another part of the stage re-binds.
std::vector<size_t> find_foldable_calls(
    const torch::jit::mobile::Code& code, const OperatorSchema& schema_of, const std::set<size_t>& skipped);

// Why a run of `code` may write one of its constants, or anything that may share memory with one (the same
// trace); "" when it cannot. Bind-time freezing (attribute_freezing.h) asks this of every rewritten function.
std::string why_a_constant_may_be_written(const torch::jit::mobile::Code& code, const OperatorSchema& schema_of);

// The kernel a folded call is re-bound to.
class FoldedCall {
 public:
  FoldedCall(std::function<void(torch::jit::Stack&)> op, size_t inputs, size_t outputs)
      : op_(std::move(op)), inputs_(inputs), outputs_(outputs) {}

  void operator()(torch::jit::Stack& stack) const;

  // The caller's calls (a background preparation run's are not counted) that ran the operator, and that
  // reused the remembered results.
  int64_t computed() const;
  int64_t reused() const;

 private:
  bool same_inputs_locked(const torch::jit::Stack& stack) const;

  std::function<void(torch::jit::Stack&)> op_;
  size_t inputs_, outputs_;
  mutable std::mutex mutex_;
  mutable std::vector<c10::IValue> last_inputs_, last_outputs_; // empty until the first call
  mutable bool remembered_ = false;
  mutable int64_t computed_ = 0, reused_ = 0;
};

// What a run returns must not share memory with any result a folded call handed to it (remembered results
// reused, and results just remembered, which later runs may be handed): they are noted per thread, so another run
// replacing a folded call's remembered results meanwhile changes nothing.
// Forgets what was handed to this thread's runs so far (call before a run).
void forget_handed_out();
// `value` (a run's result, on the thread that ran it) with every tensor, through tuples, lists and dicts, that
// shares memory with a result handed to the run cloned; then forgets them.
c10::IValue protect_from_handed_out(c10::IValue value);

} // namespace lightweight_dispatch
