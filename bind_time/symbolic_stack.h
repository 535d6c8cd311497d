// The part of a symbolic run of mobile bytecode that the bind-time stage's traces share (weight_sites.cpp's,
// where each value is the site that produced it; folded_values.cpp's, where it is an object known to be fixed or
// not): a stack and registers of abstract values, and the instructions that only move values between them.
#pragma once

#include <torch/csrc/jit/runtime/instruction.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

namespace lightweight_dispatch {

class SymbolicStack {
 public:
  // `unknown`: what a register holds before a store, and what lies below what the run pushed (the function's
  // arguments).
  SymbolicStack(size_t registers, int unknown) : unknown_(unknown), registers_(registers + 1, unknown) {}

  void push(int value) {
    stack_.push_back(value);
  }
  void push(size_t count, int value) {
    stack_.insert(stack_.end(), count, value);
  }
  int pop() {
    if (stack_.empty()) {
      return unknown_;
    }
    const int value = stack_.back();
    stack_.pop_back();
    return value;
  }
  // The top `n` values, the deepest first.
  std::vector<int> pop(size_t n) {
    std::vector<int> values(n, unknown_);
    for (size_t i = n; i-- > 0;) {
      values[i] = pop();
    }
    return values;
  }
  // Throws std::out_of_range for a register the function does not have: bytecode a trace should not follow.
  int& reg(int64_t index) {
    if (index < 0 || static_cast<size_t>(index) >= registers_.size()) {
      throw std::out_of_range("register");
    }
    return registers_[static_cast<size_t>(index)];
  }

  // The effect of LOAD, MOVE, STORE, STOREN, DROP and DROPR; false (and no effect) for any other instruction.
  bool move_values(const torch::jit::Instruction& inst) {
    switch (inst.op) {
      case torch::jit::LOAD:
        push(reg(inst.X));
        return true;
      case torch::jit::MOVE:
        push(std::exchange(reg(inst.X), unknown_));
        return true;
      case torch::jit::STORE:
        reg(inst.X) = pop();
        return true;
      case torch::jit::STOREN:
        for (int64_t i = inst.N - 1; i >= 0; --i) {
          reg(inst.X + i) = pop();
        }
        return true;
      case torch::jit::DROP:
        pop();
        return true;
      case torch::jit::DROPR:
        reg(inst.X) = unknown_;
        return true;
      default:
        return false;
    }
  }

  const std::vector<int>& stack() const {
    return stack_;
  }
  const std::vector<int>& registers() const {
    return registers_;
  }

 private:
  int unknown_;
  std::vector<int> stack_;
  std::vector<int> registers_;
};

} // namespace lightweight_dispatch
