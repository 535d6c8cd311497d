#include <bind_time/folded_values.h>

#include <bind_time/operator_facts.h>
#include <bind_time/preparation_run.h>
#include <bind_time/symbolic_stack.h>
#include <runtime/op_binding.h>
#include <runtime/tensor_tree.h>

#include <torch/csrc/jit/runtime/instruction.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <utility>

namespace lightweight_dispatch {

namespace {

using torch::jit::Instruction;
namespace opcode = torch::jit;

// Operators that read only their input's shape.
bool reads_only_shape(const std::string& op) {
  return op == "aten::size" || op == "aten::size.int" || op == "aten::dim" || op == "aten::numel";
}

bool returns_tensors(const c10::FunctionSchema& schema) {
  if (schema.returns().empty()) {
    return false;
  }
  for (const c10::Argument& result : schema.returns()) {
    const auto& type = result.type();
    if (type->kind() != c10::TypeKind::TensorType &&
        !(type->kind() == c10::TypeKind::ListType && type->containedType(0)->kind() == c10::TypeKind::TensorType)) {
      return false;
    }
  }
  return true;
}

// The symbolic run. A value is an object (LOAD copies the reference, as the interpreter does): what is known
// of each object is whether it is fixed, whether it may share memory with a fixed tensor, and whether it may be
// the very object another run sees (a constant, a remembered result).
class FoldTracker {
 public:
  FoldTracker(const torch::jit::mobile::Code& code, const OperatorSchema& schema_of, const std::set<size_t>& skipped)
      : code_(code), schema_of_(schema_of), skipped_(skipped), values_(code.register_size_, kUnknown) {}

  std::vector<size_t> run() && {
    size_t pc = 0;
    for (; pc < code_.instructions_.size() && !unsafe_; ++pc) {
      if (!step(pc, code_.instructions_[pc])) {
        break;
      }
    }
    if (unsafe_ || !remainder_is_safe(pc)) {
      return {};
    }
    return std::move(foldable_);
  }

  // Why a run may write a constant, or what may share its memory; "" if the trace proves it cannot.
  std::string why_a_constant_may_be_written() && {
    constants_only_ = true;
    size_t pc = 0;
    for (; pc < code_.instructions_.size() && !unsafe_; ++pc) {
      if (!step(pc, code_.instructions_[pc])) {
        break;
      }
    }
    if (unsafe_) {
      return unsafe_because_;
    }
    if (!remainder_is_safe(pc)) {
      return "past instruction " + std::to_string(pc) + ", where the trace stops, " + remainder_because_;
    }
    return "";
  }

 private:
  struct Object {
    bool fixed = false;
    bool aliases_fixed = false; // may share memory with a fixed tensor (a view of one, a list holding one)
    bool shared = false;        // may be an object other runs see too: a constant, a folded call's result
  };
  static constexpr int kUnknown = 0; // object 0: not fixed, shares nothing (the function's arguments)

  int make(Object object) {
    objects_.push_back(object);
    return static_cast<int>(objects_.size() - 1);
  }
  Object& object(int id) {
    return objects_[id];
  }
  bool touches_fixed(int id) {
    return object(id).fixed || object(id).aliases_fixed;
  }



  bool step(size_t pc, const Instruction& inst) {
    try {
      if (values_.move_values(inst)) {
        return true;
      }
      switch (inst.op) {
        case opcode::OP:
        case opcode::OPN:
          return call(pc, inst);
        case opcode::LOADC:
          values_.push(make({true, false, true}));
          return true;
        case opcode::LIST_CONSTRUCT:
        case opcode::DICT_CONSTRUCT:
          return construct(static_cast<size_t>(inst.N));
        case opcode::TUPLE_CONSTRUCT:
          return construct(static_cast<size_t>(inst.X));
        case opcode::LIST_UNPACK: {
          const int list = values_.pop();
          const Object element{object(list).fixed, touches_fixed(list), object(list).shared};
          for (int64_t i = 0; i < inst.X; ++i) {
            values_.push(make(element));
          }
          return true;
        }
        case opcode::DIM:
          values_.pop();
          values_.push(make({true, false, false})); // a size
          return true;
        case opcode::FORMAT: // a new string
          values_.pop(static_cast<size_t>(inst.X));
          values_.push(kUnknown);
          return true;
        case opcode::JF:
          return raising_block_.enter(code_, pc, values_);
        case opcode::JMP:
          return raising_block_.steps_over(pc);
        case opcode::RAISE_EXCEPTION:
          return raising_block_.leave(pc, values_);
        default:
          return false; // jumps, calls, attributes, tuple indexing ...: the trace stops here
      }
    } catch (const std::out_of_range&) {
      return false;
    }
  }

  // A new container of the popped values (a fresh one each run).
  bool construct(size_t n) {
    bool fixed = true, aliases = false;
    for (int value : values_.pop(n)) {
      fixed = fixed && object(value).fixed;
      aliases = aliases || touches_fixed(value);
    }
    values_.push(make({fixed, aliases, false}));
    return true;
  }

  bool call(size_t pc, const Instruction& inst) {
    const std::string name = op_display_name(code_.op_names_[inst.X]);
    const c10::FunctionSchema* schema = schema_of_(name);
    if (schema == nullptr) {
      return false;
    }
    const OperatorFacts facts = operator_facts(*schema);
    int given = inst.op == opcode::OPN ? static_cast<int>(inst.N) : code_.operator_input_sizes_[inst.X];
    if (given < 0) {
      given = static_cast<int>(schema->arguments().size());
    }
    const std::vector<int> inputs = values_.pop(static_cast<size_t>(given));
    bool writes = false, all_fixed = true, any_touches = false, any_shared = false;
    std::vector<int> written_containers;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Object& input = object(inputs[i]);
      const bool declared = i < schema->arguments().size();
      if (declared && is_immutable_value(schema->arguments()[i].type())) {
        all_fixed = all_fixed && input.fixed; // a number: nothing can write it, nothing shares memory with it
        continue;
      }
      if (may_write_argument(*schema, facts, i)) {
        writes = true;
        const bool container = i < schema->arguments().size() && writes_only_the_container(schema->arguments()[i].type());
        // Folding: nothing fixed may be written (it may be remembered). Freezing: no constant may be.
        const bool fixed_written = !constants_only_ && !container && touches_fixed(inputs[i]);
        if (input.shared || fixed_written) {
          unsafe_ = true; // a remembered or constant object, or the fixed data, would change under its copies
          unsafe_because_ = name + " at instruction " + std::to_string(pc) + " may write argument " +
                            std::to_string(i) + ", which may be or share memory with a constant";
        } else if (container) {
          written_containers.push_back(inputs[i]); // a fresh list or dict of this run: it may now hold the others
        }
      }
      all_fixed = all_fixed && input.fixed;
      if (!declared || can_hold_tensor(schema->arguments()[i].type())) { // an int[] shares no tensor's memory
        any_touches = any_touches || touches_fixed(inputs[i]);
        any_shared = any_shared || input.shared;
      }
    }
    const bool fixed = reads_only_shape(name) || (all_fixed && !writes && facts.deterministic);
    const bool folded = fixed && !reads_only_shape(name) && returns_tensors(*schema) && skipped_.count(pc) == 0;
    if (folded) {
      foldable_.push_back(pc);
      folds_containers_ = folds_containers_ || !returns_plain_tensors(*schema);
    }
    for (int container : written_containers) {
      object(container).fixed = object(container).fixed && all_fixed;
      object(container).aliases_fixed = object(container).aliases_fixed || any_touches;
    }
    for (size_t i = 0; i < schema->returns().size(); ++i) {
      if (i == 0 && name == "aten::append.t" && !inputs.empty()) {
        values_.push(inputs[0]); // the list itself
        continue;
      }
      const bool may_alias = result_may_alias_arguments(*schema, facts, i);
      values_.push(make({fixed, !fixed && any_touches && may_alias, folded || (may_alias && any_shared)}));
    }
    return true;
  }

  static bool returns_plain_tensors(const c10::FunctionSchema& schema) {
    for (const c10::Argument& result : schema.returns()) {
      if (result.type()->kind() != c10::TypeKind::TensorType) {
        return false;
      }
    }
    return true;
  }

  // Past the traced part nothing is followed: nothing there may write a tensor or call a function, nor write a
  // list or dict when a folded call hands out remembered lists.
  bool remainder_is_safe(size_t from) const {
    for (size_t pc = from; pc < code_.instructions_.size(); ++pc) {
      const Instruction& inst = code_.instructions_[pc];
      const std::string at = " at instruction " + std::to_string(pc);
      if (inst.op == opcode::CALL || inst.op == opcode::INTERFACE_CALL || inst.op == opcode::SET_ATTR) {
        remainder_because_ = std::string(opcode_name(inst.op)) + at + " may write anything";
        return false;
      }
      if (inst.op != opcode::OP && inst.op != opcode::OPN) {
        continue;
      }
      const std::string name = op_display_name(code_.op_names_[inst.X]);
      const c10::FunctionSchema* schema = schema_of_(name);
      if (schema == nullptr) {
        remainder_because_ = name + at + " has no known schema";
        return false;
      }
      const OperatorFacts facts = operator_facts(*schema);
      const size_t given = inst.op == opcode::OPN ? static_cast<size_t>(inst.N) : schema->arguments().size();
      for (size_t i = 0; i < std::max(given, schema->arguments().size()); ++i) {
        const bool container = i < schema->arguments().size() && writes_only_the_container(schema->arguments()[i].type());
        const bool immutable = i < schema->arguments().size() && is_immutable_value(schema->arguments()[i].type());
        if (may_write_argument(*schema, facts, i) && !immutable && (!container || folds_containers_)) {
          remainder_because_ = name + at + " may write argument " + std::to_string(i);
          return false;
        }
      }
    }
    return true;
  }

  const torch::jit::mobile::Code& code_;
  const OperatorSchema& schema_of_;
  const std::set<size_t>& skipped_;
  std::vector<Object> objects_{Object{}};
  SymbolicStack values_; // each value: an object of objects_
  RaisingBlockPassage raising_block_;
  std::vector<size_t> foldable_;
  bool folds_containers_ = false; // some folded call returns a list: its remembered list is handed out
  bool unsafe_ = false;
  bool constants_only_ = false; // the question is only whether a constant may be written
  std::string unsafe_because_;
  mutable std::string remainder_because_;
};

bool same_argument(const c10::IValue& a, const c10::IValue& b);

bool same_elements(c10::ArrayRef<c10::IValue> x, c10::ArrayRef<c10::IValue> y) {
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), same_argument);
}

// Whether two arguments are the same for a folded call: numbers and lists by value, tensors by identity (fixed
// tensors are constants or remembered results, never written).
bool same_argument(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() || b.isTensor()) {
    return a.isTensor() && b.isTensor() && a.toTensor().unsafeGetTensorImpl() == b.toTensor().unsafeGetTensorImpl();
  }
  if (a.isInt() && b.isInt()) {
    return a.toInt() == b.toInt();
  }
  if (a.isDouble() && b.isDouble()) {
    const double x = a.toDouble(), y = b.toDouble();
    return std::memcmp(&x, &y, sizeof x) == 0; // -0.0 is not 0.0 here
  }
  if (a.isBool() && b.isBool()) {
    return a.toBool() == b.toBool();
  }
  if (a.isNone() && b.isNone()) {
    return true;
  }
  if (a.isString() && b.isString()) {
    return a.toStringRef() == b.toStringRef();
  }
  if (a.isList() && b.isList()) {
    return same_elements(a.toListRef(), b.toListRef());
  }
  if (a.isTuple() && b.isTuple()) {
    return same_elements(a.toTupleRef().elements(), b.toTupleRef().elements());
  }
  return false; // anything else (devices, dtypes as ints are ints): computed again
}

} // namespace

std::vector<size_t> find_foldable_calls(
    const torch::jit::mobile::Code& code, const OperatorSchema& schema_of, const std::set<size_t>& skipped) {
  return FoldTracker(code, schema_of, skipped).run();
}

std::string why_a_constant_may_be_written(const torch::jit::mobile::Code& code, const OperatorSchema& schema_of) {
  const std::set<size_t> none;
  return FoldTracker(code, schema_of, none).why_a_constant_may_be_written();
}

namespace {

// The storages of the results folded calls handed to this thread's run (folded_values.h), in the order handed out
// (a few dozen a run: a vector whose capacity stays, not a set that allocates a node per entry).
thread_local std::vector<const void*> handed_out;

void hand_out(const std::vector<c10::IValue>& outputs) {
  for (const c10::IValue& output : outputs) {
    for_each_tensor(output, [](const at::Tensor& t) {
      if (t.defined() && t.has_storage()) {
        handed_out.push_back(t.storage().unsafeGetStorageImpl());
      }
    });
  }
}

} // namespace

void forget_handed_out() {
  handed_out.clear();
}

c10::IValue protect_from_handed_out(c10::IValue value) {
  if (handed_out.empty()) {
    return value;
  }
  value = map_tensors(std::move(value), [](const at::Tensor& t) {
    const bool shares = t.defined() && t.has_storage() &&
                        std::find(handed_out.begin(), handed_out.end(), t.storage().unsafeGetStorageImpl()) !=
                            handed_out.end();
    return shares ? t.clone() : t;
  });
  handed_out.clear();
  return value;
}

void FoldedCall::operator()(torch::jit::Stack& stack) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (remembered_ && same_inputs_locked(stack)) {
      torch::jit::drop(stack, inputs_);
      stack.insert(stack.end(), last_outputs_.begin(), last_outputs_.end());
      hand_out(last_outputs_);
      reused_ += in_callers_run() ? 1 : 0; // the caller's calls only
      return;
    }
  }
  std::vector<c10::IValue> inputs(stack.end() - static_cast<std::ptrdiff_t>(inputs_), stack.end());
  op_(stack);
  std::vector<c10::IValue> outputs(stack.end() - static_cast<std::ptrdiff_t>(outputs_), stack.end());
  hand_out(outputs); // remembered now: a later run may be handed them
  std::lock_guard<std::mutex> lock(mutex_);
  last_inputs_ = std::move(inputs);
  last_outputs_ = std::move(outputs);
  remembered_ = true;
  computed_ += in_callers_run() ? 1 : 0;
}

bool FoldedCall::same_inputs_locked(const torch::jit::Stack& stack) const {
  const size_t base = stack.size() - inputs_;
  for (size_t i = 0; i < inputs_; ++i) {
    if (!same_argument(stack[base + i], last_inputs_[i])) {
      return false;
    }
  }
  return true;
}

int64_t FoldedCall::computed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return computed_;
}

int64_t FoldedCall::reused() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reused_;
}

} // namespace lightweight_dispatch
