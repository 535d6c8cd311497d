// Binding a loaded lite-interpreter module's operator call sites to generated kernels.
#pragma once

#include <lightweight_dispatch/kernel_table.h>

#include <torch/csrc/jit/mobile/module.h>
#include <torch/csrc/jit/runtime/instruction.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace lightweight_dispatch {

// How a call site's operator runs.
enum class OpPath {
  Static,     // a generated kernel that calls the per-backend kernel directly
  Jit,        // a JIT-native operator (aten::size, prim::*), kept as the interpreter implements it
  Dispatcher, // through the c10 dispatcher: the stock interpreter's path (--dispatch dynamic), or a generated
              // function for an operator LibTorch exports no entry point for (OpUse::reason says which)
};

const char* op_path_name(OpPath path);

struct OpUse {
  std::string name; // "aten::add.Tensor"
  OpPath path;
  // Why a statically bound operator still goes through the dispatcher (quantized_ops.yaml); empty otherwise.
  std::string reason;
};

// Every distinct operator a module calls, sorted by name, with the path it takes.
struct BindingReport {
  std::vector<OpUse> ops;
};

// Raised when a module cannot be bound; the message names every offending operator at once.
class BindingError : public std::runtime_error {
 public:
  BindingError(std::string message, std::vector<std::string> ops)
      : std::runtime_error(std::move(message)), ops_(std::move(ops)) {}
  const std::vector<std::string>& ops() const {
    return ops_;
  }

 private:
  std::vector<std::string> ops_;
};

// The generated kernels by operator name. Built once; read-only afterwards, so one index (and the call
// sites bound from it) can be shared by threads. Schemas are parsed only for the operators a model calls.
class KernelIndex {
 public:
  explicit KernelIndex(c10::ArrayRef<GeneratedKernel> kernels);
  const GeneratedKernel* find(const std::string& op_name) const;

 private:
  std::unordered_map<std::string, const GeneratedKernel*> by_name_;
};

// Static dispatch: re-bind every call site of a native operator in every function of `module` to
// its generated kernel. Throws BindingError naming every native operator the build lacks and every
// operator nothing implements. Never falls back to the dispatcher.
BindingReport bind_static(torch::jit::mobile::Module& module, const KernelIndex& index);

// Dynamic dispatch: leave the stock interpreter's bindings and report which path each op takes.
BindingReport describe_dynamic(const torch::jit::mobile::Module& module);

// Every function `module` can run: its compilation unit's methods and, transitively, every function a
// CALL instruction names (operator upgraders the loader attached to old models). Upgraders attached but
// never called are left out: their operators are never bound.
std::vector<torch::jit::mobile::Function*> functions_to_run(const torch::jit::mobile::Module& module);

// The model's own methods: the functions of its top-level module's class, in the compilation unit's order. They
// are the only functions a caller can run (Model::run_method). A submodule's method (a quantized conv's
// __setstate__, which the loader runs) runs after the load only if one of them calls it.
std::vector<torch::jit::mobile::Function*> model_methods(const torch::jit::mobile::Module& module);

// The model's method `name`, or null. LibTorch's Module::find_method matches the name alone, so it can return a
// submodule's method of that name, which would then run on the model's object, not the submodule's.
torch::jit::mobile::Function* find_model_method(const torch::jit::mobile::Module& module, const std::string& name);

// Every function a caller's run can reach: the model's methods and, transitively, every function a CALL of
// theirs names. Nothing else runs after the load; INTERFACE_CALL (a method found by name at run time) is for
// the caller of this to treat as reaching anything.
std::vector<torch::jit::mobile::Function*> functions_callers_reach(const torch::jit::mobile::Module& module);

// An operator's schema by its name ("aten::add.Tensor"), or null if unknown: what the bind-time stage traces the
// bytecode with.
using OperatorSchema = std::function<const c10::FunctionSchema*(const std::string& op_name)>;

// "aten::add.Tensor" from an OperatorName.
std::string op_display_name(const c10::OperatorName& name);

// The opcode's name as the bytecode spells it: "SET_ATTR".
const char* opcode_name(torch::jit::OpCode op);

} // namespace lightweight_dispatch
