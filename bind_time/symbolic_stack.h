// The part of a symbolic run of mobile bytecode that the bind-time stage's traces share (weight_sites.cpp's,
// where each value is the site that produced it; folded_values.cpp's, where it is an object known to be fixed or
// not): a stack and registers of abstract values, and the instructions that only move values between them.
#pragma once

#include <torch/csrc/jit/mobile/code.h>
#include <torch/csrc/jit/runtime/instruction.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace lightweight_dispatch {

// Instructions some jump lands on: where another path joins, so what the stack holds there may come from either.
inline std::set<size_t> jump_targets(const std::vector<torch::jit::Instruction>& instructions) {
  std::set<size_t> targets;
  for (size_t pc = 0; pc < instructions.size(); ++pc) {
    const torch::jit::Instruction& inst = instructions[pc];
    if (inst.op == torch::jit::JF || inst.op == torch::jit::JMP || inst.op == torch::jit::LOOP) {
      targets.insert(static_cast<size_t>(static_cast<int64_t>(pc) + inst.X));
    }
  }
  return targets;
}

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

// A JF whose one path only raises (a check: "expected 4D input"): the instructions of that path, a straight run
// (no jump, call or attribute write) ending in RAISE_EXCEPTION that no other jump lands in, and where the other
// path goes on. Either the JF falls through to the run and jumps past it (JF over the raise), or it falls through
// to a JMP past the run and jumps into it (JF 2; JMP). A trace may step through the run (its reads are uses) and
// then go on with the state it had after the JF: the only path that continues is the other one.
struct RaisingBlock {
  size_t first = 0;    // the run's first instruction
  size_t continues = 0; // where the other path goes: right after the run's RAISE_EXCEPTION
  size_t skipped_jump = 0; // the JMP a "JF 2; JMP" form steps over (0: none)
};

inline std::optional<RaisingBlock> raising_block_at(const torch::jit::mobile::Code& code, size_t pc) {
  const auto& instructions = code.instructions_;
  if (pc + 1 >= instructions.size() || instructions[pc].op != torch::jit::JF || instructions[pc].X < 2) {
    return std::nullopt;
  }
  RaisingBlock block;
  if (instructions[pc].X == 2 && instructions[pc + 1].op == torch::jit::JMP && instructions[pc + 1].X > 1) {
    block = {pc + 2, pc + 1 + static_cast<size_t>(instructions[pc + 1].X), pc + 1};
  } else {
    block = {pc + 1, pc + static_cast<size_t>(instructions[pc].X), 0};
  }
  if (block.continues > instructions.size() || block.continues <= block.first ||
      instructions[block.continues - 1].op != torch::jit::RAISE_EXCEPTION) {
    return std::nullopt;
  }
  for (size_t i = block.first; i + 1 < block.continues; ++i) {
    const torch::jit::OpCode op = instructions[i].op;
    if (op == torch::jit::JF || op == torch::jit::JMP || op == torch::jit::LOOP || op == torch::jit::CALL ||
        op == torch::jit::INTERFACE_CALL || op == torch::jit::SET_ATTR || op == torch::jit::RET ||
        op == torch::jit::RAISE_EXCEPTION) {
      return std::nullopt;
    }
  }
  for (size_t from = 0; from < instructions.size(); ++from) {
    const torch::jit::Instruction& inst = instructions[from];
    if (from != pc && from != block.skipped_jump &&
        (inst.op == torch::jit::JF || inst.op == torch::jit::JMP || inst.op == torch::jit::LOOP)) {
      const int64_t lands = static_cast<int64_t>(from) + inst.X;
      if (lands > static_cast<int64_t>(pc) && lands < static_cast<int64_t>(block.continues)) {
        return std::nullopt;
      }
    }
  }
  return block;
}

// A trace's passage through raising blocks: at the JF it pops the condition and keeps the state; the block's
// instructions are traced as any others (the "JF 2; JMP" form's JMP is stepped over); at its RAISE_EXCEPTION the
// trace gets the kept state back and goes on at the instruction after it.
class RaisingBlockPassage {
 public:
  // At a JF: false (the trace stops) unless it opens a raising block.
  bool enter(const torch::jit::mobile::Code& code, size_t pc, SymbolicStack& values) {
    const std::optional<RaisingBlock> block = raising_block_at(code, pc);
    if (!block || block_) {
      return false;
    }
    values.pop(); // the condition
    kept_ = values;
    block_ = block;
    return true;
  }
  // At a JMP: whether it is the one the block's form steps over.
  bool steps_over(size_t pc) const {
    return block_ && block_->skipped_jump == pc;
  }
  // At a RAISE_EXCEPTION: false unless it ends the open block; then `values` is as it was after the JF.
  bool leave(size_t pc, SymbolicStack& values) {
    if (!block_ || pc + 1 != block_->continues) {
      return false;
    }
    values = *kept_;
    kept_.reset();
    block_.reset();
    return true;
  }

 private:
  std::optional<SymbolicStack> kept_;
  std::optional<RaisingBlock> block_;
};

} // namespace lightweight_dispatch
