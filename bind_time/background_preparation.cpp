#include <bind_time/background_preparation.h>

#include <bind_time/operator_facts.h>
#include <bind_time/preparation_run.h>
#include <bind_time/symbolic_stack.h>
#include <runtime/op_binding.h>
#include <runtime/tensor_tree.h>

#include <ATen/Parallel.h>
#include <torch/csrc/jit/mobile/code.h>
#include <torch/csrc/jit/mobile/function.h>
#include <torch/csrc/jit/runtime/instruction.h>

#include <chrono>
#include <exception>
#include <set>

namespace lightweight_dispatch {

namespace {

bool same_constant(const c10::IValue& a, const c10::IValue& b) {
  if (a.isDouble() && b.isDouble()) {
    return a.toDouble() == b.toDouble();
  }
  if (a.isBool() && b.isBool()) {
    return a.toBool() == b.toBool();
  }
  return false;
}

// Whether the call at `pc` passes `when.value` as `when.argument` on every path: the argument left to its default
// and the default is that value, or pushed by a LOADC of that value that only single pushes (LOADC, LOAD, MOVE)
// follow up to the call, none of them a jump target (no other path joins between the push and the call).
bool passes_constant(const torch::jit::mobile::Code& code, size_t pc, const c10::FunctionSchema& schema,
    const DrawsNothingWhen& when, const std::set<size_t>& targets) {
  const torch::jit::Instruction& inst = code.instructions_[pc];
  const int given = inst.op == torch::jit::OPN ? static_cast<int>(inst.N) : code.operator_input_sizes_[inst.X];
  const std::optional<int> index = schema.argumentIndexWithName(when.argument);
  if (!index || given < 0) {
    return false;
  }
  if (*index >= given) {
    const std::optional<c10::IValue>& default_value = schema.arguments()[static_cast<size_t>(*index)].default_value();
    return default_value && same_constant(*default_value, when.value);
  }
  const size_t after = static_cast<size_t>(given - 1 - *index); // values pushed after the argument's
  if (pc < after + 1) {
    return false;
  }
  for (size_t i = 1; i <= after + 1; ++i) {
    const size_t at = pc - i;
    if (targets.count(at + 1) != 0) {
      return false;
    }
    const torch::jit::OpCode op = code.instructions_[at].op;
    const bool single_push = op == torch::jit::LOADC || op == torch::jit::LOAD || op == torch::jit::MOVE;
    if (!single_push) {
      return false;
    }
  }
  const torch::jit::Instruction& push = code.instructions_[pc - after - 1];
  return push.op == torch::jit::LOADC && push.X >= 0 && static_cast<size_t>(push.X) < code.constants_.size() &&
         same_constant(code.constants_[static_cast<size_t>(push.X)], when.value);
}

// What a run may execute: the functions a caller's run reaches (a submodule's __setstate__ ran at the load and
// never again); every function of the model where one of those calls a method found by name (INTERFACE_CALL).
std::vector<torch::jit::mobile::Function*> functions_a_run_may_reach(const torch::jit::mobile::Module& module) {
  std::vector<torch::jit::mobile::Function*> reached = functions_callers_reach(module);
  for (const torch::jit::mobile::Function* function : reached) {
    for (const torch::jit::Instruction& inst : function->get_code().instructions_) {
      if (inst.op == torch::jit::INTERFACE_CALL) {
        return functions_to_run(module);
      }
    }
  }
  return reached;
}

} // namespace

std::string why_a_preparation_run_would_show(
    const torch::jit::mobile::Module& module, const std::function<const c10::FunctionSchema*(const std::string&)>& schema_of) {
  for (const torch::jit::mobile::Function* function : functions_a_run_may_reach(module)) {
    const auto& code = function->get_code();
    const std::string where = " (" + function->qualname().qualifiedName() + ")";
    const std::set<size_t> targets = jump_targets(code.instructions_);
    for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
      const torch::jit::Instruction& inst = code.instructions_[pc];
      if (inst.op == torch::jit::GET_ATTR || inst.op == torch::jit::SET_ATTR) {
        return "it reads or writes the module's attributes, state a second run could change" + where;
      }
      if (inst.op == torch::jit::WARN) {
        return "it warns (warnings.warn): a second run would warn again" + where;
      }
      if (inst.op != torch::jit::OP && inst.op != torch::jit::OPN) {
        continue;
      }
      const std::string op = op_display_name(code.op_names_[inst.X]);
      const c10::FunctionSchema* schema = schema_of(op);
      if (schema == nullptr) {
        return "it calls " + op + ", whose schema is unknown" + where;
      }
      const OperatorFacts facts = operator_facts(*schema);
      if (facts.acts_outside) {
        return "it calls " + op + ", which returns nothing and acts outside the model (prints, warns, seeds): a "
               "second run would do it again" + where;
      }
      const std::optional<DrawsNothingWhen> draws_nothing = draws_nothing_when(*schema);
      if (!facts.deterministic && draws_nothing && passes_constant(code, pc, *schema, *draws_nothing, targets)) {
        continue; // this call draws no random number: a second run gives the same results
      }
      if (!facts.deterministic) {
        return "it calls " + op + ", which " + facts.nondeterministic_because +
               ": a second run would draw other numbers, or move the generator the caller's runs draw from" + where;
      }
    }
  }
  return "";
}

BackgroundPreparer::BackgroundPreparer(MethodRun run) : run_(std::move(run)) {}

BackgroundPreparer::~BackgroundPreparer() {
  wait();
  if (worker_.joinable()) {
    worker_.join();
  }
}

void BackgroundPreparer::start(const std::string& method, const std::vector<c10::IValue>& inputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (status_.running) {
    return;
  }
  if (worker_.joinable()) {
    worker_.join(); // the last run has finished (it cleared `running`): only its thread's exit is left
  }
  std::vector<c10::IValue> copy = deep_copies(inputs); // the run may change it without touching the caller's
  status_.running = true;
  running_.store(true, std::memory_order_release);
  note_preparation_run_started(); // a race on a caller's thread waits from now on, not from the thread's start
  status_.runs += 1;
  worker_ = std::thread([this, method, copy = std::move(copy)]() mutable {
    const auto start = std::chrono::steady_clock::now();
    std::string error;
    try {
      at::init_num_threads(); // the intra-op thread count set for the process, not the runtime's default
      const PreparationRunScope scope;
      run_(method, std::move(copy));
    } catch (const std::exception& e) {
      error = e.what();
      error = error.substr(0, error.find('\n'));
    } catch (...) {
      error = "an unknown exception";
    }
    finish(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
        std::move(error));
  });
}

void BackgroundPreparer::finish(double ms, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    note_preparation_run_finished();
    status_.running = false;
    running_.store(false, std::memory_order_release);
    status_.busy_ms += ms;
    status_.error = std::move(error);
  }
  idle_.notify_all();
}

void BackgroundPreparer::wait() const {
  if (!running_.load(std::memory_order_acquire)) {
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return !status_.running; });
}

BackgroundPreparationStatus BackgroundPreparer::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

} // namespace lightweight_dispatch
