#include <bind_time/in_place_elementwise.h>

#include <bind_time/preparation_run.h>
#include <runtime/op_binding.h>

#include <ATen/ops/empty_strided.h>
#include <torch/csrc/jit/runtime/instruction.h>

namespace lightweight_dispatch {

namespace {

bool is_float_cpu_tensor(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
         !t.requires_grad() && !t.is_neg() && !t.unsafeGetTensorImpl()->is_wrapped_number();
}

// Whether writing into `target` is invisible to everyone but this call: nothing else refers to it or its storage,
// and its memory is LibTorch's own.
bool held_by_this_call_only(const at::Tensor& target) {
  if (target.use_count() != 1 || target.weak_use_count() != 1 || !target.has_storage()) {
    return false;
  }
  const c10::Storage& storage = target.storage();
  return storage.use_count() == 1 && storage.resizable() && storage.allocator() != nullptr;
}

// `other` broadcasts into `target`: the result has target's sizes.
bool broadcasts_into(const at::Tensor& other, const at::Tensor& target) {
  if (other.dim() > target.dim()) {
    return false;
  }
  for (int64_t i = 1; i <= other.dim(); ++i) {
    const int64_t size = other.size(-i);
    if (size != 1 && size != target.size(-i)) {
      return false;
    }
  }
  return true;
}

bool may_write_into(const at::Tensor& target, const at::Tensor& other) {
  return is_float_cpu_tensor(target) && is_float_cpu_tensor(other) && target.numel() > 0 &&
         target.is_non_overlapping_and_dense() && broadcasts_into(other, target) && held_by_this_call_only(target);
}

bool is_one(const c10::IValue& alpha) {
  return (alpha.isInt() && alpha.toInt() == 1) || (alpha.isDouble() && alpha.toDouble() == 1.0);
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() && a.view(at::kInt).equal(b.view(at::kInt));
}

void append_shape(std::vector<int64_t>& key, const at::Tensor& t) {
  key.push_back(t.dim());
  key.insert(key.end(), t.sizes().begin(), t.sizes().end());
  key.insert(key.end(), t.strides().begin(), t.strides().end());
}

} // namespace

std::string in_place_overload_of(const std::string& op_name) {
  if (op_name == "aten::add.Tensor") {
    return "aten::add_.Tensor";
  }
  if (op_name == "aten::mul.Tensor") {
    return "aten::mul_.Tensor";
  }
  return "";
}

std::vector<size_t> find_in_place_candidates(const torch::jit::mobile::Code& code) {
  std::vector<size_t> calls;
  for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
    const auto& inst = code.instructions_[pc];
    if (inst.op == torch::jit::OP &&
        !in_place_overload_of(op_display_name(code.op_names_[static_cast<size_t>(inst.X)])).empty()) {
      calls.push_back(pc);
    }
  }
  return calls;
}

void InPlaceElementwiseKernel::operator()(torch::jit::Stack& stack) const {
  const size_t first = stack.size() - inputs_;
  const int target = writable_operand(stack, first);
  const bool counted = in_callers_run(); // not a preparation run's or a model check's calls
  if (target < 0 || !shape_agrees(stack, first, target)) {
    allocating_calls_ += counted ? 1 : 0;
    generated_(stack);
    return;
  }
  in_place_calls_ += counted ? 1 : 0;
  run_in_place(stack, first, target);
}

int InPlaceElementwiseKernel::writable_operand(const torch::jit::Stack& stack, size_t first) const {
  if (inputs_ < 2 || !stack[first].isTensor() || !stack[first + 1].isTensor()) {
    return -1;
  }
  const at::Tensor& self = stack[first].toTensor();
  const at::Tensor& other = stack[first + 1].toTensor();
  if (may_write_into(self, other)) {
    return 0;
  }
  // self * other == other * self, and self + other == other + self, bit for bit; self + alpha * other is not.
  const bool commutes = op_ == ElementwiseOp::Mul || inputs_ < 3 || is_one(stack[first + 2]);
  return commutes && may_write_into(other, self) ? 1 : -1;
}

bool InPlaceElementwiseKernel::shape_agrees(const torch::jit::Stack& stack, size_t first, int target) const {
  const at::Tensor& written = stack[first + static_cast<size_t>(target)].toTensor();
  const at::Tensor& other = stack[first + 1 - static_cast<size_t>(target)].toTensor();
  std::vector<int64_t> key{target};
  append_shape(key, written);
  append_shape(key, other);
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto found = agrees_for_.find(key); found != agrees_for_.end()) {
    return found->second;
  }
  if (in_comparison_run()) {
    return false; // a model check's run checks nothing (model_check.h): it allocates, as without the stage
  }
  note_stage_decision(); // checked now or in the preparation run
  if (in_callers_run() && preparation_run_follows() && deferred_.insert(key).second) {
    note_unprepared_shape(); // checked in the preparation run that follows, not on this caller's call
    return false;
  }
  // Both kernels on this call's values, the in-place one on a copy with the same strides.
  torch::jit::Stack allocating(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end());
  generated_(allocating);
  at::Tensor copy = at::empty_strided(written.sizes(), written.strides(), written.options());
  copy.copy_(written);
  torch::jit::Stack in_place(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end());
  in_place[static_cast<size_t>(target)] = copy;
  run_in_place(in_place, 0, target);
  const bool agrees = allocating.back().isTensor() && in_place.back().isTensor() &&
                      same_bits(allocating.back().toTensor(), in_place.back().toTensor());
  agrees_for_.emplace(std::move(key), agrees);
  return agrees;
}

void InPlaceElementwiseKernel::run_in_place(torch::jit::Stack& stack, size_t first, int target) const {
  torch::jit::Stack call;
  call.reserve(3);
  call.push_back(std::move(stack[first + static_cast<size_t>(target)])); // self, written into
  call.push_back(std::move(stack[first + 1 - static_cast<size_t>(target)]));
  if (op_ == ElementwiseOp::Add) {
    call.push_back(inputs_ >= 3 ? stack[first + 2] : c10::IValue(1)); // alpha
  }
  stack.erase(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end());
  in_place_(call);
  stack.push_back(std::move(call.back()));
}

} // namespace lightweight_dispatch
