// lite_predictor's own loop over a loaded module's bytecode.
//
// The stock lite interpreter (torch::jit::mobile::InterpreterState) opens a RecordFunction scope,
// reads thread-local state and bounds-checks operands on every instruction it runs; for a model made of
// small ops that costs more than the statically dispatched kernel call itself. BytecodeInterpreter
// checks every function's bytecode once, when it is prepared, and then runs it without per-instruction
// checks. It runs the instructions that make up loops, calls and operator invocations itself; each rarer
// instruction (FORMAT, RAISE_EXCEPTION, DICT_CONSTRUCT, ...) is handed, one at a time, to the stock
// interpreter so its semantics and messages stay exactly the stock ones.
#pragma once

#include <torch/csrc/jit/mobile/code.h>
#include <torch/csrc/jit/mobile/module.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace lightweight_dispatch {

// Bytecode that fails the checks made when it is prepared; the message names the function, the
// instruction and what is wrong with it.
class BytecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One method of a loaded module (and every function it can call), checked once and then runnable from
// any number of threads at once: all run-time state lives on the caller's stack. The module must
// outlive the interpreter, and its call sites must be bound (bind_static, or the stock loader's own
// binding) before it is prepared.
class BytecodeInterpreter {
 public:
  BytecodeInterpreter(const torch::jit::mobile::Module& module, const std::string& method_name);

  // Runs the method on `inputs` (the module object is passed as self) and returns its result.
  // Errors raised by operators or by the model are rethrown with the function and instruction added.
  c10::IValue run(std::vector<c10::IValue> inputs) const;

 private:
  struct PreparedCode {
    std::string function_name;
    // Per instruction: a two-instruction program (the instruction, then RET) for the stock interpreter,
    // or null where this interpreter runs the instruction itself.
    std::vector<std::unique_ptr<torch::jit::mobile::Code>> delegated;
  };

  void prepare(const torch::jit::mobile::Function& function);
  const PreparedCode& prepared(const torch::jit::mobile::Code& code) const;
  void execute(torch::jit::Stack& stack) const;

  c10::intrusive_ptr<c10::ivalue::Object> self_;
  const torch::jit::mobile::Code* entry_ = nullptr;
  std::unordered_map<const torch::jit::mobile::Code*, PreparedCode> codes_;
};

} // namespace lightweight_dispatch
