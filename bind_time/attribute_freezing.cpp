#include <bind_time/attribute_freezing.h>

#include <bind_time/folded_values.h>
#include <bind_time/operator_facts.h>
#include <bind_time/symbolic_stack.h>

#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/mobile/code.h>
#include <torch/csrc/jit/mobile/function.h>
#include <torch/csrc/jit/runtime/instruction.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace lightweight_dispatch {

namespace {

using torch::jit::Instruction;
using torch::jit::OpCode;
namespace opcode = torch::jit;

bool is_jump(OpCode op) {
  return op == opcode::JF || op == opcode::JMP || op == opcode::LOOP;
}

// One instruction of a function being rewritten. A jump's target is held as an index into the same list, so
// instructions can be removed and the offsets made again afterwards.
struct Item {
  Instruction inst;
  int64_t debug_handle = -1;
  size_t target = 0; // jumps only
  bool removed = false;
  size_t origin = 0; // the instruction of the code it was read from that it stands for
};

// The instructions some jump lands on, by index (one past the last included: a jump may land there).
class JumpTargets {
 public:
  explicit JumpTargets(size_t instructions) : is_target_(instructions + 1, false) {}
  void add(size_t pc) {
    if (pc < is_target_.size()) {
      is_target_[pc] = true;
    }
  }
  size_t count(size_t pc) const {
    return pc < is_target_.size() && is_target_[pc] ? 1 : 0;
  }

 private:
  std::vector<bool> is_target_;
};

// A None, bool, int or float constant, by its kind and its bits: a float is the same constant only with the same
// bits (-0.0 is not 0.0, which IValue::isSameIdentity would call the same).
using NumberKey = std::pair<int, uint64_t>;
std::optional<NumberKey> number_key(const c10::IValue& value) {
  if (value.isNone()) {
    return NumberKey{0, 0};
  }
  if (value.isBool()) {
    return NumberKey{1, value.toBool() ? 1 : 0};
  }
  if (value.isInt()) {
    return NumberKey{2, static_cast<uint64_t>(value.toInt())};
  }
  if (value.isDouble()) {
    const double d = value.toDouble();
    uint64_t bits = 0;
    std::memcpy(&bits, &d, sizeof bits);
    return NumberKey{3, bits};
  }
  return std::nullopt;
}

// A function's bytecode while it is rewritten.
struct Program {
  std::vector<Item> items;
  std::vector<c10::IValue> constants;
  bool has_debug_handles = false;
  // The constants that are objects, by address, and those that are numbers, bools or None, by value (the first of
  // each), up to `indexed`. The constants hold their objects alive, so an address names one object, of one kind.
  std::map<const void*, int64_t> constants_by_address;
  std::map<NumberKey, int64_t> constants_by_number;
  size_t indexed = 0;

  void index_constants() {
    for (; indexed < constants.size(); ++indexed) {
      const c10::IValue& c = constants[indexed];
      if (c.isPtrType()) {
        constants_by_address.emplace(c.internalToPointer(), static_cast<int64_t>(indexed));
      } else if (const std::optional<NumberKey> key = number_key(c)) {
        constants_by_number.emplace(*key, static_cast<int64_t>(indexed));
      }
    }
  }

  static Program of(const torch::jit::mobile::Code& code) {
    Program program;
    program.constants = code.constants_;
    program.has_debug_handles = code.debug_handles_.size() == code.instructions_.size();
    program.items.reserve(code.instructions_.size());
    for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
      Item item{code.instructions_[pc], program.has_debug_handles ? code.debug_handles_[pc] : -1, 0, false, pc};
      if (is_jump(item.inst.op)) {
        item.target = static_cast<size_t>(static_cast<int64_t>(pc) + item.inst.X);
      }
      program.items.push_back(item);
    }
    return program;
  }

  // Drops removed items; a jump to a removed one now lands on the next kept one.
  void compact() {
    std::vector<size_t> new_index(items.size() + 1);
    size_t kept = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      new_index[i] = kept;
      kept += items[i].removed ? 0 : 1;
    }
    new_index[items.size()] = kept;
    std::vector<Item> result;
    result.reserve(kept);
    for (const Item& item : items) {
      if (!item.removed) {
        result.push_back(item);
        if (is_jump(item.inst.op)) {
          result.back().target = new_index[item.target];
        }
      }
    }
    items = std::move(result);
  }

  JumpTargets jump_targets() const {
    JumpTargets targets(items.size());
    for (const Item& item : items) {
      if (!item.removed && is_jump(item.inst.op)) {
        targets.add(item.target);
      }
    }
    return targets;
  }

  // The index of a constant that is `value` itself (the same object, or the same number), added if there is none.
  int64_t constant(const c10::IValue& value) {
    if (value.isPtrType()) { // an object: found by its address (a model has thousands of tensors)
      index_constants();
      const auto found = constants_by_address.find(value.internalToPointer());
      if (found != constants_by_address.end()) {
        return found->second;
      }
    } else if (const std::optional<NumberKey> number = number_key(value)) { // by kind and bits: thousands, frozen
      index_constants();
      const auto found = constants_by_number.find(*number);
      if (found != constants_by_number.end()) {
        return found->second;
      }
    } else {
      for (size_t i = 0; i < constants.size(); ++i) {
        if (constants[i].isSameIdentity(value) && constants[i].tagKind() == value.tagKind()) {
          return static_cast<int64_t>(i);
        }
      }
    }
    constants.push_back(value);
    return static_cast<int64_t>(constants.size() - 1);
  }

  // The same program for `code`, whose bytecode is the one this was read from but for its debug handles.
  Program for_same_bytecode(const torch::jit::mobile::Code& code) const {
    Program program = *this;
    program.has_debug_handles = code.debug_handles_.size() == code.instructions_.size();
    for (Item& item : program.items) {
      item.debug_handle = program.has_debug_handles ? code.debug_handles_[item.origin] : -1;
    }
    return program;
  }

  void write_to(torch::jit::mobile::Code& code) const {
    std::vector<Instruction> instructions;
    std::vector<int64_t> handles;
    for (size_t pc = 0; pc < items.size(); ++pc) {
      Instruction inst = items[pc].inst;
      if (is_jump(inst.op)) {
        inst.X = static_cast<int32_t>(static_cast<int64_t>(items[pc].target) - static_cast<int64_t>(pc));
      }
      instructions.push_back(inst);
      handles.push_back(items[pc].debug_handle);
    }
    code.instructions_ = std::move(instructions);
    if (has_debug_handles) {
      code.debug_handles_ = std::move(handles);
    }
    code.constants_ = constants;
  }
};

Instruction make(OpCode op, int64_t x, int64_t n = 0) {
  return Instruction(op, static_cast<int32_t>(x), static_cast<uint16_t>(n));
}

bool is_number(const c10::IValue& value) {
  return value.isInt() || value.isDouble() || value.isBool();
}

// A list argument an operator only reads: int[], float[] or bool[], with no alias annotation.
bool reads_number_list(const c10::FunctionSchema& schema, size_t index) {
  if (index >= schema.arguments().size()) {
    return false;
  }
  const c10::Argument& argument = schema.arguments()[index];
  if (argument.alias_info() != nullptr || argument.type()->kind() != c10::TypeKind::ListType) {
    return false;
  }
  const c10::TypeKind element = argument.type()->containedType(0)->kind();
  return element == c10::TypeKind::IntType || element == c10::TypeKind::FloatType ||
         element == c10::TypeKind::BoolType;
}

// What one forward pass over a function knows. Every value is an index into `values` (or kUnknown): an object
// known at bind time (the same object every run), or a list LIST_CONSTRUCT builds.
class KnownValues {
 public:
  static constexpr int kUnknown = -1;

  // `arguments`: the method's, `self` (the module) the first. `schemas`: each of the code's operators' schema
  // (null if unknown), by operator index.
  KnownValues(Program& program, const torch::jit::mobile::Code& code,
      const std::vector<const c10::FunctionSchema*>& schemas, const c10::IValue& self, size_t arguments,
      AttributeFreezingReport& report)
      : program_(program), code_(code), schemas_(schemas), self_(self), arguments_(arguments), report_(report),
        stack_(code.register_size_, kUnknown) {}

  // One pass: rewrites what it can as it goes; true if it changed anything.
  bool rewrite() {
    targets_ = program_.jump_targets();
    find_single_stores();
    stack_.push(known(self_)); // a method's arguments: the module, then the caller's
    stack_.push(arguments_ - 1, kUnknown);
    bool changed = false;
    size_t previous = kNone; // the last kept item before this one
    for (size_t pc = 0; pc < program_.items.size(); ++pc) {
      if (program_.items[pc].removed) {
        continue;
      }
      if (targets_.count(pc) != 0) {
        forget(); // reached from elsewhere too
      }
      changed |= step(pc, previous);
      previous = program_.items[pc].removed ? previous : pc;
    }
    forget();
    changed |= fold_lists();
    return changed;
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  struct Value {
    std::optional<c10::IValue> object; // known at bind time: the same object on every run
    size_t built_at = kNone;           // the LIST_CONSTRUCT that built it (a new list on every run)
    std::optional<c10::IValue> elements; // such a list's elements, all known constants
  };
  struct BuiltList {
    int reads = 0;     // by operators that only read it
    bool other_use = false;
  };

  int known(const c10::IValue& object) {
    values_.push_back({object, kNone, std::nullopt});
    return static_cast<int>(values_.size() - 1);
  }
  int unknown() {
    return kUnknown;
  }
  const Value* value(int id) const {
    return id >= 0 ? &values_[static_cast<size_t>(id)] : nullptr;
  }
  std::optional<c10::IValue> object_of(int id) const {
    const Value* v = value(id);
    return v != nullptr ? v->object : std::nullopt;
  }
  // A value used by something other than an operator that only reads it.
  void other_use(int id) {
    const Value* v = value(id);
    if (v != nullptr && v->built_at != kNone) {
      lists_[v->built_at].other_use = true;
    }
  }
  int pop() {
    return stack_.pop();
  }
  std::vector<int> pop(size_t n) {
    return stack_.pop(n);
  }
  // The stack's contents are no longer followed; registers keep only what every path agrees on. A register
  // written since the last time already holds that (its single store's value, or unknown), so only those
  // written are reset: an inlined model has thousands of registers and hundreds of jump targets.
  void forget() {
    for (int id : stack_.stack()) {
      other_use(id);
    }
    while (!stack_.stack().empty()) {
      stack_.pop();
    }
    for (int64_t r : written_registers_) {
      const int single = single_store_value(r);
      if (single == kNoSingleStoreValue) {
        other_use(stack_.reg(r));
        stack_.reg(r) = kUnknown;
      } else {
        stack_.reg(r) = single;
      }
    }
    written_registers_.clear();
  }
  // The register, to be written: forget() resets it.
  int& written_register(int64_t r) {
    int& slot = stack_.reg(r); // throws for a register the function does not have
    written_registers_.push_back(r);
    return slot;
  }

  // Registers stored to by exactly one instruction: what that store put there is what any later read sees.
  void find_single_stores() {
    std::vector<int> stores; // per register (registers are numbered densely, from 0)
    const auto count_store = [&](int64_t reg) {
      const size_t r = static_cast<size_t>(reg);
      if (r >= stores.size()) {
        stores.resize(r + 1, 0);
      }
      ++stores[r];
    };
    for (const Item& item : program_.items) {
      if (item.removed) {
        continue;
      }
      if (item.inst.op == opcode::STORE) {
        count_store(item.inst.X);
      } else if (item.inst.op == opcode::STOREN) {
        for (int64_t i = 0; i < item.inst.N; ++i) {
          count_store(item.inst.X + i);
        }
      }
    }
    store_counts_ = std::move(stores);
    single_store_value_.assign(store_counts_.size(), kNoSingleStoreValue);
  }
  void note_store(int64_t reg, int id) {
    const size_t r = static_cast<size_t>(reg);
    if (r < store_counts_.size() && store_counts_[r] == 1 && object_of(id)) {
      single_store_value_[r] = id;
    }
  }
  // What the single store to `reg` put there, if it has been met and was known; else kNoSingleStoreValue.
  int single_store_value(int64_t reg) const {
    const size_t r = static_cast<size_t>(reg);
    return r < single_store_value_.size() ? single_store_value_[r] : kNoSingleStoreValue;
  }

  bool is_kept_loadc(size_t index) const {
    return index != kNone && !program_.items[index].removed && program_.items[index].inst.op == opcode::LOADC;
  }

  bool step(size_t pc, size_t previous) {
    Item& item = program_.items[pc];
    const Instruction inst = item.inst;
    switch (inst.op) {
      case opcode::LOAD:
      case opcode::MOVE: {
        const int id = stack_.reg(inst.X);
        if (inst.op == opcode::MOVE) {
          written_register(inst.X) = kUnknown;
        }
        stack_.push(id);
        if (const auto object = object_of(id)) {
          // The register holds this object whenever the instruction runs: push it as a constant. A MOVE's
          // clearing of the register is dropped: it only ends a reference the module holds anyway.
          item.inst = make(opcode::LOADC, program_.constant(*object));
          return true;
        }
        return false;
      }
      case opcode::STORE: {
        const int id = pop();
        other_use(id);
        written_register(inst.X) = id;
        note_store(inst.X, id);
        return false;
      }
      case opcode::STOREN:
        for (int64_t i = inst.N - 1; i >= 0; --i) {
          const int id = pop();
          written_register(inst.X + i) = id;
          note_store(inst.X + i, id);
        }
        return false;
      case opcode::DROP:
        other_use(pop());
        return false;
      case opcode::DROPR:
        written_register(inst.X) = kUnknown;
        return false;
      case opcode::LOADC:
        stack_.push(known(program_.constants[static_cast<size_t>(inst.X)]));
        return false;
      case opcode::GET_ATTR:
        return get_attr(pc, previous);
      case opcode::JF:
        return branch(pc, previous);
      case opcode::OP:
      case opcode::OPN:
        return call(pc, previous);
      case opcode::LIST_CONSTRUCT:
        list_construct(pc, previous);
        return false;
      case opcode::__NOT__:
        return negate(pc, previous);
      case opcode::TUPLE_CONSTRUCT:
        for (int id : pop(static_cast<size_t>(inst.X))) {
          other_use(id);
        }
        stack_.push(unknown());
        return false;
      case opcode::JMP:
      case opcode::RET:
        forget(); // what follows is reached from elsewhere, if at all
        return false;
      default:
        forget(); // an instruction whose effect on the stack is not followed here
        return false;
    }
  }

  bool get_attr(size_t pc, size_t previous) {
    const int object_id = pop();
    const std::optional<c10::IValue> object = object_of(object_id);
    const int64_t slot = program_.items[pc].inst.X;
    if (!object || !object->isObject() || slot < 0 ||
        static_cast<size_t>(slot) >= object->toObjectRef().slots().size()) {
      stack_.push(unknown());
      return false;
    }
    const c10::IValue attribute = object->toObjectRef().getSlot(static_cast<size_t>(slot));
    stack_.push(known(attribute));
    if (!is_kept_loadc(previous) || targets_.count(pc) != 0) {
      return false;
    }
    // LOADC module; GET_ATTR slot -> LOADC attribute (the same object, as GET_ATTR would have pushed it).
    program_.items[previous].removed = true;
    program_.items[pc].inst = make(opcode::LOADC, program_.constant(attribute));
    ++report_.attribute_reads;
    return true;
  }

  // `not` of a known bool: LOADC b; __NOT__ -> LOADC (not b).
  bool negate(size_t pc, size_t previous) {
    const std::optional<c10::IValue> operand = object_of(pop());
    if (!operand || !operand->isBool()) {
      stack_.push(unknown());
      return false;
    }
    const c10::IValue result(!operand->toBool());
    stack_.push(known(result));
    if (!is_kept_loadc(previous) || targets_.count(pc) != 0) {
      return false;
    }
    program_.items[previous].removed = true;
    program_.items[pc].inst = make(opcode::LOADC, program_.constant(result));
    ++report_.computed_calls;
    return true;
  }

  bool branch(size_t pc, size_t previous) {
    const std::optional<c10::IValue> condition = object_of(pop());
    if (!condition || !condition->isBool() || !is_kept_loadc(previous) || targets_.count(pc) != 0) {
      return false;
    }
    program_.items[previous].removed = true;
    if (condition->toBool()) {
      program_.items[pc].removed = true; // always falls through
    } else {
      program_.items[pc].inst = make(opcode::JMP, 0); // always jumps, to the same target
    }
    ++report_.constant_branches;
    return true;
  }

  bool call(size_t pc, size_t previous) {
    const Instruction inst = program_.items[pc].inst;
    const c10::FunctionSchema* schema = schemas_.at(static_cast<size_t>(inst.X));
    int given = inst.op == opcode::OPN ? static_cast<int>(inst.N) : code_.operator_input_sizes_[inst.X];
    if (given < 0 && schema != nullptr) {
      given = static_cast<int>(schema->arguments().size());
    }
    if (schema == nullptr || given < 0) {
      forget();
      return false;
    }
    const std::vector<int> inputs = pop(static_cast<size_t>(given));
    if (is_inference_dropout(*schema, inputs)) {
      const std::vector<size_t> pushes = kept_pushes_before(previous, 2);
      if (!pushes.empty() && targets_.count(pc) == 0) {
        // dropout(input, p, false) returns input itself: the call and the constants pushed for it go, and the
        // input stays where it was, as torch.jit.freeze leaves an eval model.
        for (size_t push : pushes) {
          program_.items[push].removed = true;
        }
        program_.items[pc].removed = true;
        stack_.push(inputs[0]);
        ++report_.removed_dropouts;
        return true;
      }
    }
    if (const std::optional<c10::IValue> result = computed_now(inst, *schema, inputs)) {
      std::vector<size_t> pushes = kept_pushes_before(previous, inputs.size());
      if ((inputs.empty() || !pushes.empty()) && targets_.count(pc) == 0) {
        // The constants pushed for it and the call -> the result, a constant.
        for (size_t push : pushes) {
          program_.items[push].removed = true;
        }
        program_.items[pc].inst = make(opcode::LOADC, program_.constant(*result));
        stack_.push(known(*result));
        ++report_.computed_calls;
        return true;
      }
      stack_.push(known(*result));
      return false;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Value* v = value(inputs[i]);
      if (v != nullptr && v->built_at != kNone) {
        if (reads_number_list(*schema, i)) {
          ++lists_[v->built_at].reads;
        } else {
          lists_[v->built_at].other_use = true;
        }
      }
    }
    stack_.push(schema->returns().size(), unknown());
    return false;
  }

  // A dropout of any kind, in place or not, with `train` a known false: the call returns its input, unchanged.
  bool is_inference_dropout(const c10::FunctionSchema& schema, const std::vector<int>& inputs) const {
    static const std::set<std::string> dropouts = {"aten::dropout", "aten::dropout_", "aten::feature_dropout",
        "aten::feature_dropout_", "aten::alpha_dropout", "aten::alpha_dropout_", "aten::feature_alpha_dropout",
        "aten::feature_alpha_dropout_"};
    if (dropouts.count(schema.name()) == 0 || inputs.size() != 3 || schema.arguments().size() != 3 ||
        schema.arguments()[2].name() != "train") {
      return false;
    }
    const std::optional<c10::IValue> train = object_of(inputs[2]);
    return train && train->isBool() && !train->toBool() && object_of(inputs[1]);
  }

  // The result of a call whose every argument is known, computed now, where that is the call's result on every
  // run: a deterministic operator of numbers, bools, strings or None returning one such value (not training or
  // p == 0.0), or `is` / `is not` of two known objects. nullopt otherwise.
  std::optional<c10::IValue> computed_now(
      const Instruction& inst, const c10::FunctionSchema& schema, const std::vector<int>& inputs) {
    const std::string& name = schema.name();
    const bool identity = name == "aten::__is__" || name == "aten::__isnot__";
    if (inputs.empty() || schema.returns().size() != 1 || !is_immutable_value(schema.returns()[0].type())) {
      return std::nullopt;
    }
    const OperatorFacts facts = operator_facts(schema);
    if (!facts.deterministic || facts.acts_outside || facts.may_alias_or_write_anything) {
      return std::nullopt;
    }
    torch::jit::Stack stack;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Value* v = value(inputs[i]);
      if (v != nullptr && v->elements && !may_write_argument(schema, facts, i)) {
        stack.push_back(*v->elements); // a list of constants built for it (mode in ["batch", "row"])
        continue;
      }
      const std::optional<c10::IValue> object = object_of(inputs[i]);
      if (!object || !(identity || is_immutable_object(*object))) {
        return std::nullopt;
      }
      stack.push_back(*object);
    }
    try {
      code_.operators_.at(static_cast<size_t>(inst.X))(stack);
    } catch (const std::exception&) {
      return std::nullopt; // it raises (an int division by zero): left to raise on every run
    }
    if (stack.size() != 1 || !is_immutable_object(stack[0])) {
      return std::nullopt;
    }
    return stack[0];
  }
  static bool is_immutable_object(const c10::IValue& value) {
    return value.isInt() || value.isDouble() || value.isBool() || value.isNone() || value.isString();
  }
  // The `count` kept LOADC instructions right before `pc`, none a jump target; fewer if there are not.
  // The instructions that pushed the `count` values a call takes, when each is a kept LOADC right before it, or a
  // LIST_CONSTRUCT of such LOADCs (none a jump target); empty otherwise.
  std::vector<size_t> kept_pushes_before(size_t previous, size_t count) {
    std::vector<size_t> pushes;
    size_t at = previous;
    for (size_t i = 0; i < count; ++i) {
      if (at == kNone || program_.items[at].removed || targets_.count(at) != 0) {
        return {};
      }
      const Instruction& inst = program_.items[at].inst;
      if (inst.op == opcode::LIST_CONSTRUCT && lists_.count(at) != 0) {
        lists_[at].other_use = true; // removed with the call: not a list to fold
        pushes.push_back(at);
        for (int64_t e = 0; e < inst.N; ++e) {
          at = previous_kept(at);
          if (!is_kept_loadc(at) || targets_.count(at) != 0) {
            return {};
          }
          pushes.push_back(at);
        }
      } else if (inst.op == opcode::LOADC) {
        pushes.push_back(at);
      } else {
        return {};
      }
      at = previous_kept(at);
    }
    return pushes;
  }

  // A list of constants pushed just before it (no jump lands among them): a call of constants may be computed
  // with it, and a list of numbers may become one constant.
  void list_construct(size_t pc, size_t previous) {
    const size_t n = static_cast<size_t>(program_.items[pc].inst.N);
    const std::vector<int> elements = pop(n);
    bool constant = true, numbers = true;
    size_t at = pc;
    for (size_t i = 0; i < n && constant; ++i) {
      at = i == 0 ? previous : previous_kept(at);
      constant = is_kept_loadc(at) && targets_.count(at) == 0 && object_of(elements[n - 1 - i]) &&
                 is_immutable_object(*object_of(elements[n - 1 - i]));
      numbers = numbers && constant && is_number(*object_of(elements[n - 1 - i]));
    }
    if (!constant || targets_.count(pc) != 0) {
      for (int id : elements) {
        other_use(id);
      }
      stack_.push(unknown());
      return;
    }
    c10::impl::GenericList elements_now(code_.types_.at(static_cast<size_t>(program_.items[pc].inst.X))->containedType(0));
    for (int id : elements) {
      elements_now.push_back(*object_of(id));
    }
    values_.push_back({std::nullopt, pc, c10::IValue(std::move(elements_now))});
    lists_[pc].other_use = !numbers; // a list of strings is only ever computed with, never made a constant
    stack_.push(static_cast<int>(values_.size() - 1));
  }
  size_t previous_kept(size_t index) const {
    while (index > 0) {
      --index;
      if (!program_.items[index].removed) {
        return index;
      }
    }
    return kNone;
  }

  // Each list read by one operator only, which only reads it, becomes a constant list of the same type.
  bool fold_lists() {
    bool changed = false;
    for (const auto& [pc, use] : lists_) {
      if (use.other_use || use.reads != 1) {
        continue;
      }
      Item& item = program_.items[pc];
      const size_t n = static_cast<size_t>(item.inst.N);
      const c10::TypePtr& type = code_.types_.at(static_cast<size_t>(item.inst.X));
      c10::impl::GenericList list(type->containedType(0));
      std::vector<size_t> pushes;
      size_t at = pc;
      for (size_t i = 0; i < n; ++i) {
        at = previous_kept(at);
        pushes.push_back(at);
      }
      for (size_t i = n; i-- > 0;) {
        list.push_back(program_.constants[static_cast<size_t>(program_.items[pushes[i]].inst.X)]);
        program_.items[pushes[i]].removed = true;
      }
      program_.constants.emplace_back(std::move(list));
      item.inst = make(opcode::LOADC, static_cast<int64_t>(program_.constants.size() - 1));
      changed = true;
    }
    return changed;
  }

  Program& program_;
  const torch::jit::mobile::Code& code_;
  const std::vector<const c10::FunctionSchema*>& schemas_;
  const c10::IValue& self_;
  size_t arguments_;
  AttributeFreezingReport& report_;
  SymbolicStack stack_;
  std::vector<Value> values_;
  JumpTargets targets_{0};
  static constexpr int kNoSingleStoreValue = -2;
  std::vector<int> store_counts_;       // per register: the instructions that store to it
  std::vector<int> single_store_value_; // per register: what that store put there, once met and known
  std::vector<int64_t> written_registers_; // since the last forget(), perhaps more than once each
  std::map<size_t, BuiltList> lists_;
};

// Per register, the instructions storing to it (a STOREN as SIZE_MAX: it stores several at once) and reading it
// (LOAD, MOVE).
struct RegisterUses {
  std::vector<std::vector<size_t>> stores, reads; // indexed by register

  const std::vector<size_t>& stores_of(int64_t r) const {
    return of(stores, r);
  }
  const std::vector<size_t>& reads_of(int64_t r) const {
    return of(reads, r);
  }
  // The one instruction that stores to `r` (a STORE), or nullopt.
  std::optional<size_t> only_store(int64_t r) const {
    const std::vector<size_t>& found = stores_of(r);
    if (found.size() != 1 || found[0] == SIZE_MAX) {
      return std::nullopt;
    }
    return found[0];
  }
  bool only_read(int64_t r) const {
    return reads_of(r).size() == 1;
  }

 private:
  static const std::vector<size_t>& of(const std::vector<std::vector<size_t>>& uses, int64_t r) {
    static const std::vector<size_t> none;
    return r >= 0 && static_cast<size_t>(r) < uses.size() ? uses[static_cast<size_t>(r)] : none;
  }
};

RegisterUses register_uses(const Program& program) {
  RegisterUses uses;
  const auto add = [](std::vector<std::vector<size_t>>& uses_of, int64_t r, size_t pc) {
    const size_t index = static_cast<size_t>(r);
    if (index >= uses_of.size()) {
      uses_of.resize(index + 1);
    }
    uses_of[index].push_back(pc);
  };
  for (size_t pc = 0; pc < program.items.size(); ++pc) {
    const Instruction& inst = program.items[pc].inst;
    if (inst.op == opcode::STORE) {
      add(uses.stores, inst.X, pc);
    } else if (inst.op == opcode::STOREN) {
      for (int64_t r = inst.X; r < inst.X + inst.N; ++r) {
        add(uses.stores, r, SIZE_MAX);
      }
    } else if (inst.op == opcode::LOAD || inst.op == opcode::MOVE) {
      add(uses.reads, inst.X, pc);
    }
  }
  return uses;
}

// Removes what no path reaches, and jumps to the next instruction.
bool remove_dead_code(Program& program) {
  const size_t size = program.items.size();
  std::vector<bool> reached(size, false);
  std::vector<size_t> pending = {0};
  while (!pending.empty()) {
    const size_t pc = pending.back();
    pending.pop_back();
    if (pc >= size || reached[pc]) {
      continue;
    }
    reached[pc] = true;
    const Instruction& inst = program.items[pc].inst;
    if (is_jump(inst.op)) {
      pending.push_back(program.items[pc].target);
    }
    if (inst.op != opcode::JMP && inst.op != opcode::RET) {
      pending.push_back(pc + 1);
    }
  }
  bool changed = false;
  for (size_t pc = 0; pc < size; ++pc) {
    if (!reached[pc]) {
      program.items[pc].removed = true;
      changed = true;
    }
  }
  program.compact();
  for (size_t pc = 0; pc < program.items.size(); ++pc) {
    if (program.items[pc].inst.op == opcode::JMP && program.items[pc].target == pc + 1) {
      program.items[pc].removed = true;
      changed = true;
    }
  }
  program.compact();
  return changed;
}

// Stores no instruction reads back, values pushed only to be dropped, and a value stored only to be pushed
// straight back (what inlining leaves of `result = self.block(x); result += x`: the conv's result would stand
// between the conv and the add that could be fused into it).
bool remove_dead_stores(Program& program) {
  const RegisterUses uses = register_uses(program);
  const auto read = [&](int64_t r) { return !uses.reads_of(r).empty(); };
  const JumpTargets targets = program.jump_targets();
  bool changed = false;
  for (size_t pc = 0; pc < program.items.size(); ++pc) {
    Item& item = program.items[pc];
    if (item.inst.op == opcode::STORE && !read(item.inst.X)) {
      item.inst = make(opcode::DROP, 0);
      changed = true;
    } else if (item.inst.op == opcode::DROPR && !read(item.inst.X)) {
      item.removed = true;
      changed = true;
    }
  }
  for (size_t pc = 1; pc < program.items.size(); ++pc) {
    Item& before = program.items[pc - 1];
    Item& item = program.items[pc];
    if (before.removed || item.removed || targets.count(pc) != 0) {
      continue;
    }
    const bool pushed_then_dropped = before.inst.op == opcode::LOADC && item.inst.op == opcode::DROP;
    // STORE r; MOVE r leaves the value where it was (and the register empty, which no read may see).
    const bool stored_then_moved =
        before.inst.op == opcode::STORE && item.inst.op == opcode::MOVE && before.inst.X == item.inst.X;
    // STORE r; LOAD r, the register's only store and only read: the value stays on the stack, and the register
    // is never set (its DROPRs go in the next round, as drops of a register nothing reads). Only the time the
    // register would have kept the tensor alive changes.
    const bool stored_then_loaded_once = before.inst.op == opcode::STORE && item.inst.op == opcode::LOAD &&
                                         before.inst.X == item.inst.X && uses.only_read(item.inst.X) &&
                                         uses.only_store(item.inst.X) == pc - 1;
    if (pushed_then_dropped || stored_then_moved || stored_then_loaded_once) {
      before.removed = item.removed = true;
      changed = true;
    }
  }
  program.compact();
  return changed;
}

const c10::IValue& constant_at(const Program& program, size_t pc) {
  return program.constants[static_cast<size_t>(program.items[pc].inst.X)];
}

std::optional<at::Tensor> float_tensor(const c10::IValue& value, int64_t dim) {
  if (!value.isTensor()) {
    return std::nullopt;
  }
  const at::Tensor& t = value.toTensor();
  if (t.dim() != dim || t.scalar_type() != at::kFloat || t.is_quantized()) {
    return std::nullopt;
  }
  return t;
}

// weight * scale per output channel (the weight's first dimension) into `to`, which may be the weight's own memory:
// each product in double precision, rounded once to float. One pass, no double-precision copy of the weight
// (ResNet-18's 11M weights made four of them).
void scale_per_output_channel(const at::Tensor& weight, const std::vector<double>& scale, float* to) {
  const at::Tensor w = weight.contiguous();
  const int64_t channels = w.size(0), per_channel = channels == 0 ? 0 : w.numel() / channels;
  const float* from = w.const_data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const double f = scale[static_cast<size_t>(c)];
    for (int64_t i = c * per_channel, end = i + per_channel; i < end; ++i) {
      to[i] = static_cast<float>(static_cast<double>(from[i]) * f);
    }
  }
}

// A batch norm folded into its conv: the conv's new weight and bias. The weight's values are written only once the
// freezing stands (write_folded_weights): until then `weight` is allocated, untouched, and nothing reads it (the
// conv it is the weight of runs later, and no call is computed at bind time on a tensor's values).
struct FoldedConv {
  at::Tensor source;         // the conv's weight as the model holds it
  std::vector<double> scale; // gamma / sqrt(var + eps), per output channel
  at::Tensor weight, bias;
};

// A float tensor's values in double precision (1-dim, one per channel), or `otherwise` for an absent one.
std::vector<double> per_channel(const std::optional<at::Tensor>& t, int64_t channels, double otherwise) {
  std::vector<double> values(static_cast<size_t>(channels), otherwise);
  if (t) {
    const at::Tensor c = t->contiguous();
    const float* data = c.const_data_ptr<float>();
    for (int64_t i = 0; i < channels; ++i) {
      values[static_cast<size_t>(i)] = static_cast<double>(data[i]);
    }
  }
  return values;
}

// conv2d(W, b) then batch_norm(gamma, beta, mean, var, eps) in inference, as one conv2d:
// scale = gamma / sqrt(var + eps), W' = W * scale (per output channel), b' = (b - mean) * scale + beta, each step
// in double precision, rounded once to float. Plain loops over the channels: these are a few hundred numbers, and
// ATen calls for them were a fifth of an unfrozen ShuffleNet's bind time. W' is written later (FoldedConv).
FoldedConv folded_conv(const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& gamma, const std::optional<at::Tensor>& beta, const at::Tensor& mean,
    const at::Tensor& var, double eps) {
  const int64_t channels = weight.size(0);
  const std::vector<double> m = per_channel(mean, channels, 0), v = per_channel(var, channels, 0);
  const std::vector<double> g = per_channel(gamma, channels, 1), b = per_channel(bias, channels, 0);
  const std::vector<double> beta_values = per_channel(beta, channels, 0);
  std::vector<double> scale(static_cast<size_t>(channels));
  at::Tensor shift = at::empty({channels}, weight.options());
  float* shift_of = shift.mutable_data_ptr<float>();
  for (size_t c = 0; c < static_cast<size_t>(channels); ++c) {
    double s = 1.0 / std::sqrt(v[c] + eps);
    if (gamma) {
      s *= g[c];
    }
    double t = bias ? (b[c] - m[c]) * s : -m[c] * s;
    if (beta) {
      t += beta_values[c];
    }
    scale[c] = s;
    shift_of[c] = static_cast<float>(t);
  }
  at::Tensor folded = at::empty(weight.sizes(), weight.options().memory_format(at::MemoryFormat::Contiguous));
  return FoldedConv{weight, std::move(scale), std::move(folded), std::move(shift)};
}

// Folds already made, by the tensors they were made from (conv weight and bias, gamma, beta, running mean and
// variance; null for an absent one) and eps: a model's methods that inline the same submodules (torchvision's
// ResNet has forward and _forward_impl) share one folded weight instead of computing and holding one each.
using FoldKey = std::pair<std::vector<const void*>, double>;
using BatchNormFolds = std::map<FoldKey, FoldedConv>;

// conv2d(input, W, b, ...) then batch_norm(that, gamma, beta, mean, var, false, momentum, eps, cudnn), every
// argument but the input a constant pushed just before its call: the conv2d with
// W' = W * gamma / sqrt(var + eps) (per output channel) and b' = (b - mean) * gamma / sqrt(var + eps) + beta
// computes the pair, in double precision, rounded once to float.
bool fold_batch_norms(
    Program& program, const torch::jit::mobile::Code& code, BatchNormFolds& folds, AttributeFreezingReport& report) {
  const JumpTargets targets = program.jump_targets();
  std::vector<std::string> op_names; // by operator index: named once, not at every instruction looked at
  op_names.reserve(code.op_names_.size());
  for (const c10::OperatorName& name : code.op_names_) {
    op_names.push_back(op_display_name(name));
  }
  static const std::string not_an_operator;
  auto op_at = [&](size_t pc) -> const std::string& {
    const Instruction& inst = program.items[pc].inst;
    return inst.op == opcode::OP ? op_names[static_cast<size_t>(inst.X)] : not_an_operator;
  };
  auto given_at = [&](size_t pc) { return code.operator_input_sizes_[program.items[pc].inst.X]; };
  auto constants_before = [&](size_t pc, size_t count) {
    if (pc < count) {
      return false;
    }
    for (size_t i = 1; i <= count; ++i) {
      if (program.items[pc - i].inst.op != opcode::LOADC || targets.count(pc - i + 1) != 0) {
        return false;
      }
    }
    return true;
  };
  // The conv2d whose result the batch_norm at `bn` normalises, and nothing else reads but for its sizes:
  // pushed right before the batch norm's constants, or stored once in a register that the batch norm's input
  // is read from, and that is otherwise read only for DIM (a batch norm's input check).
  const RegisterUses uses = register_uses(program);
  auto conv_feeding = [&](size_t bn) -> std::optional<size_t> {
    const size_t input = bn - 9;
    if (op_at(input) == "aten::conv2d" && targets.count(input + 1) == 0) {
      return input;
    }
    const Instruction& read = program.items[input].inst;
    if (read.op != opcode::LOAD && read.op != opcode::MOVE) {
      return std::nullopt;
    }
    const std::vector<size_t>& stored = uses.stores_of(read.X);
    if (stored.size() != 1) {
      return std::nullopt; // never stored here (an argument), or stored more than once
    }
    const std::optional<size_t> store = stored[0];
    for (size_t pc : uses.reads_of(read.X)) {
      const bool size_only = pc + 1 < program.items.size() && program.items[pc + 1].inst.op == opcode::DIM &&
                             targets.count(pc + 1) == 0;
      if (pc != input && !size_only) {
        return std::nullopt;
      }
    }
    if (*store == SIZE_MAX || *store == 0 || targets.count(*store) != 0 || op_at(*store - 1) != "aten::conv2d") {
      return std::nullopt;
    }
    return *store - 1;
  };
  bool changed = false;
  for (size_t bn = 10; bn < program.items.size(); ++bn) {
    if (op_at(bn) != "aten::batch_norm" || given_at(bn) != 9 || !constants_before(bn, 8)) {
      continue;
    }
    const std::optional<size_t> feeding = conv_feeding(bn);
    if (!feeding) {
      continue;
    }
    const size_t conv = *feeding;
    const int conv_given = given_at(conv);
    if (conv_given < 3 || !constants_before(conv, static_cast<size_t>(conv_given - 1))) {
      continue;
    }
    const size_t weight_pc = conv - static_cast<size_t>(conv_given - 1), bias_pc = weight_pc + 1;
    const std::optional<at::Tensor> weight = float_tensor(constant_at(program, weight_pc), 4);
    const c10::IValue& bias = constant_at(program, bias_pc);
    const c10::IValue& training = constant_at(program, bn - 4);
    const c10::IValue& eps = constant_at(program, bn - 2);
    if (!weight || !(bias.isNone() || float_tensor(bias, 1)) || !training.isBool() || training.toBool() ||
        !eps.isDouble()) {
      continue;
    }
    const int64_t channels = weight->size(0);
    std::vector<std::optional<at::Tensor>> statistics; // gamma, beta, mean, var
    bool usable = true;
    for (size_t i = 0; i < 4 && usable; ++i) {
      const c10::IValue& value = constant_at(program, bn - 8 + i);
      const bool may_be_none = i < 2; // gamma and beta are optional; the running statistics are needed
      if (value.isNone() && may_be_none) {
        statistics.emplace_back(std::nullopt);
        continue;
      }
      const std::optional<at::Tensor> t = float_tensor(value, 1);
      usable = t && t->size(0) == channels;
      statistics.push_back(t);
    }
    if (!usable || (!bias.isNone() && bias.toTensor().size(0) != channels)) {
      continue;
    }
    const auto address = [](const std::optional<at::Tensor>& t) -> const void* {
      return t ? t->unsafeGetTensorImpl() : nullptr;
    };
    const FoldKey key{{weight->unsafeGetTensorImpl(), bias.isNone() ? nullptr : bias.toTensor().unsafeGetTensorImpl(),
                          address(statistics[0]), address(statistics[1]), address(statistics[2]),
                          address(statistics[3])},
        eps.toDouble()};
    auto found = folds.find(key);
    if (found == folds.end()) {
      c10::AutoGradMode no_grad(false); // plain tensors, not inference ones: a run may be outside inference mode
      const std::optional<at::Tensor> conv_bias =
          bias.isNone() ? std::nullopt : std::optional<at::Tensor>(bias.toTensor());
      found = folds.emplace(key, folded_conv(*weight, conv_bias, statistics[0], statistics[1], *statistics[2],
                                     *statistics[3], eps.toDouble()))
                  .first;
    }
    const at::Tensor& folded_weight = found->second.weight;
    program.constants.emplace_back(folded_weight);
    program.items[weight_pc].inst = make(opcode::LOADC, static_cast<int64_t>(program.constants.size() - 1));
    program.constants.emplace_back(found->second.bias);
    program.items[bias_pc].inst = make(opcode::LOADC, static_cast<int64_t>(program.constants.size() - 1));
    for (size_t i = 0; i <= 8; ++i) {
      program.items[bn - i].removed = true; // the batch_norm call and the constants pushed for it
    }
    ++report.folded_batch_norms;
    changed = true;
  }
  program.compact();
  return changed;
}

// The function's bytecode, one instruction a line, with each operator's name and each constant's kind.
void print_bytecode(std::ostream& out, const std::string& name, const torch::jit::mobile::Code& code) {
  out << "bytecode of " << name << " after bind-time freezing:\n";
  for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
    const Instruction& inst = code.instructions_[pc];
    out << "  " << pc << " " << opcode_name(inst.op) << " " << inst.X << " " << inst.N;
    if (inst.op == opcode::OP || inst.op == opcode::OPN) {
      out << "  " << op_display_name(code.op_names_[static_cast<size_t>(inst.X)]);
    } else if (inst.op == opcode::LOADC) {
      out << "  " << code.constants_[static_cast<size_t>(inst.X)].tagKind();
    } else if (is_jump(inst.op)) {
      out << "  -> " << static_cast<int64_t>(pc) + inst.X;
    }
    out << "\n";
  }
}

// Why the model's attributes may change between or during runs, seen from its bytecode alone; "" if they cannot.
// Only what a caller's run can reach counts: the model's own methods and the functions they call. A submodule's
// __setstate__ (every quantized conv has one) assigns attributes, but only the loader runs it, before binding;
// Model::run_method runs the model's own methods only.
std::string why_attributes_may_change(const torch::jit::mobile::Module& module) {
  for (const torch::jit::mobile::Function* function : functions_callers_reach(module)) {
    const auto& code = function->get_code();
    for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
      const OpCode op = code.instructions_[pc].op;
      if (op == opcode::SET_ATTR || op == opcode::CALL || op == opcode::INTERFACE_CALL) {
        return function->qualname().qualifiedName() + " has " + opcode_name(op) + " at instruction " +
               std::to_string(pc) + (op == opcode::SET_ATTR ? ": it assigns an attribute"
                                                          : ": the function it calls could change attributes");
      }
    }
  }
  return "";
}

bool reads_attributes(const torch::jit::mobile::Module& module) {
  for (const torch::jit::mobile::Function* function : functions_to_run(module)) {
    for (const Instruction& inst : function->get_code().instructions_) {
      if (inst.op == opcode::GET_ATTR) {
        return true;
      }
    }
  }
  return false;
}

bool is_method_of(const torch::jit::mobile::Function& function, const c10::IValue& self) {
  if (!function.hasSchema() || function.getSchema().arguments().empty()) {
    return false;
  }
  const c10::TypePtr& first = function.getSchema().arguments()[0].type();
  return first != nullptr && self.isObject() && first->repr_str() == self.type()->repr_str();
}

// Every tensor storage a run could read through a constant, looking into lists, tuples, dicts (keys too) and
// objects (a constant module's slots are its attributes). runtime/tensor_tree.h's for_each_tensor walks a returned
// value's containers only; this one must also go into objects, which may refer to each other (`seen`).
void collect_storages(const c10::IValue& value, std::set<const c10::StorageImpl*>& storages, std::set<const void*>& seen) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (t.defined() && t.has_storage()) {
      storages.insert(t.storage().unsafeGetStorageImpl());
    }
    return;
  }
  if (!value.isPtrType() || !seen.insert(value.internalToPointer()).second) {
    return;
  }
  if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      collect_storages(element, storages, seen);
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      collect_storages(element, storages, seen);
    }
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      collect_storages(entry.key(), storages, seen);
      collect_storages(entry.value(), storages, seen);
    }
  } else if (value.isObject()) {
    for (const c10::IValue& slot : value.toObjectRef().slots()) {
      collect_storages(slot, storages, seen);
    }
  }
}

// Whether the fold may overwrite its source weight: a contiguous float tensor that is all of its storage, in memory
// LibTorch's CPU allocator gave (writable, not a mapped file), that no other fold starts from and that no run can
// read otherwise. A run reaches a module's attributes only through GET_ATTR (none is left) or a constant holding
// them (`reachable`); the model's object itself is unchanged but nothing reads its slots any more.
bool may_overwrite(const at::Tensor& source, size_t folds_from_it, bool attributes_read,
    const std::set<const c10::StorageImpl*>& reachable) {
  if (attributes_read || folds_from_it != 1 || source.scalar_type() != at::kFloat || !source.is_contiguous() ||
      source.storage_offset() != 0 || !source.has_storage()) {
    return false;
  }
  const c10::Storage& storage = source.storage();
  return storage.nbytes() == static_cast<size_t>(source.numel()) * sizeof(float) &&
         storage.data_ptr().get_deleter() == c10::GetCPUAllocator()->raw_deleter() &&
         reachable.count(storage.unsafeGetStorageImpl()) == 0;
}

// Writes each fold's weight, once the freezing stands: into the source weight's own memory where only the fold can
// reach it (no second copy of the model's conv weights, no fresh pages to fault in), else into its own. Returns
// how many were written in place.
int64_t write_folded_weights(BatchNormFolds& folds, const torch::jit::mobile::Module& module) {
  bool attributes_read = false;
  std::set<const c10::StorageImpl*> reachable;
  std::set<const void*> seen;
  for (const torch::jit::mobile::Function* function : functions_to_run(module)) {
    const auto& code = function->get_code();
    for (const Instruction& inst : code.instructions_) {
      attributes_read |= inst.op == opcode::GET_ATTR;
      if (inst.op == opcode::LOADC) { // the one way bytecode reads a constant (INTERFACE_CALL's name is a string)
        collect_storages(code.constants_.at(static_cast<size_t>(inst.X)), reachable, seen);
      }
    }
  }
  std::map<const c10::StorageImpl*, size_t> folds_from;
  for (const auto& entry : folds) {
    if (entry.second.source.has_storage()) {
      ++folds_from[entry.second.source.storage().unsafeGetStorageImpl()];
    }
  }
  int64_t in_place = 0;
  for (auto& entry : folds) {
    FoldedConv& fold = entry.second;
    const size_t from_it =
        fold.source.has_storage() ? folds_from[fold.source.storage().unsafeGetStorageImpl()] : 0;
    if (may_overwrite(fold.source, from_it, attributes_read, reachable)) {
      scale_per_output_channel(fold.source, fold.scale, fold.source.mutable_data_ptr<float>());
      // The constant the bytecode already holds now views the source's memory; its own (never touched) is freed.
      fold.weight.unsafeGetTensorImpl()->set_storage_keep_dtype(fold.source.storage());
      ++in_place;
    } else {
      scale_per_output_channel(fold.source, fold.scale, fold.weight.mutable_data_ptr<float>());
    }
  }
  return in_place;
}

// Whether two functions' bytecode does the same, the debug handles aside: the same instructions, operators and called
// functions, their constants the same objects (the same tensor, not an equal one) and their types equal, wherever
// each function's tables put them (the exporter numbers each function's constants and types on its own).
bool same_bytecode(const torch::jit::mobile::Code& a, const torch::jit::mobile::Code& b) {
  if (a.register_size_ != b.register_size_ || a.op_names_ != b.op_names_ ||
      a.operator_input_sizes_ != b.operator_input_sizes_ || a.functions_ != b.functions_ ||
      a.instructions_.size() != b.instructions_.size()) {
    return false;
  }
  const auto same_constant = [&](int64_t x, int64_t y) {
    return x >= 0 && y >= 0 && static_cast<size_t>(x) < a.constants_.size() &&
           static_cast<size_t>(y) < b.constants_.size() &&
           a.constants_[x].tagKind() == b.constants_[y].tagKind() && a.constants_[x].isSameIdentity(b.constants_[y]);
  };
  const auto same_types = [&](int64_t x, int64_t y, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      if (x + i < 0 || y + i < 0 || static_cast<size_t>(x + i) >= a.types_.size() ||
          static_cast<size_t>(y + i) >= b.types_.size() || *a.types_[x + i] != *b.types_[y + i]) {
        return false;
      }
    }
    return true;
  };
  for (size_t pc = 0; pc < a.instructions_.size(); ++pc) {
    const Instruction& x = a.instructions_[pc];
    const Instruction& y = b.instructions_[pc];
    if (x.op != y.op || x.N != y.N) {
      return false;
    }
    switch (x.op) {
      case opcode::LOADC:
      case opcode::INTERFACE_CALL: // X: the method's name, a constant
        if (!same_constant(x.X, y.X)) {
          return false;
        }
        break;
      case opcode::LIST_CONSTRUCT:
      case opcode::DICT_CONSTRUCT:
      case opcode::NAMED_TUPLE_CONSTRUCT:
      case opcode::CREATE_OBJECT:
      case opcode::ISINSTANCE: // types [X, X + N); the others type X
        if (!same_types(x.X, y.X, x.op == opcode::ISINSTANCE ? x.N : 1)) {
          return false;
        }
        break;
      case opcode::GUARD:
      case opcode::TYPECHECK:
      case opcode::FAIL_GUARD:
      case opcode::PROFILE_OP:
      case opcode::TAIL_CALL:
      case opcode::FORK:
      case opcode::AWAITABLE:
      case opcode::ENTER:
      case opcode::EXIT:
        return false; // not in a mobile model's bytecode; not compared
      default: // X is a register, a slot, an operator, a function, an offset or a count: the same in both
        if (x.X != y.X) {
          return false;
        }
    }
  }
  return true;
}

void add_counts(AttributeFreezingReport& total, const AttributeFreezingReport& part) {
  total.attribute_reads += part.attribute_reads;
  total.folded_batch_norms += part.folded_batch_norms;
  total.constant_branches += part.constant_branches;
  total.computed_calls += part.computed_calls;
  total.removed_dropouts += part.removed_dropouts;
}

// The function's bytecode rewritten until nothing more changes.
Program frozen(const torch::jit::mobile::Code& code, const OperatorSchema& schema_of, const c10::IValue& self,
    size_t arguments, BatchNormFolds& folds, AttributeFreezingReport& report) {
  Program program = Program::of(code);
  std::vector<const c10::FunctionSchema*> schemas; // looked up once, not at every call in every round
  schemas.reserve(code.op_names_.size());
  for (const c10::OperatorName& name : code.op_names_) {
    schemas.push_back(schema_of(op_display_name(name)));
  }
  for (int round = 0; round < 64; ++round) {
    bool changed = KnownValues(program, code, schemas, self, arguments, report).rewrite();
    program.compact();
    changed |= remove_dead_code(program);
    changed |= remove_dead_stores(program);
    if (!changed) {
      changed = fold_batch_norms(program, code, folds, report);
    }
    if (!changed) {
      break;
    }
  }
  return program;
}

} // namespace

AttributeFreezingReport freeze_attributes(torch::jit::mobile::Module& module, const OperatorSchema& schema_of) {
  AttributeFreezingReport report;
  if (!reads_attributes(module)) {
    return report; // nothing to freeze (a frozen model)
  }
  report.kept_because = why_attributes_may_change(module);
  if (!report.kept_because.empty()) {
    return report;
  }
  struct Rewritten {
    torch::jit::mobile::Function* function;
    torch::jit::mobile::Code original;
  };
  std::vector<Rewritten> rewritten;
  const c10::IValue self = module._ivalue();
  size_t instructions_before = 0, instructions_after = 0;
  std::string refused;
  BatchNormFolds folds;
  struct FrozenOnce {
    const torch::jit::mobile::Code* original; // in `rewritten`
    size_t arguments;
    Program program;
    AttributeFreezingReport counts; // what freezing it found, counted again for each function that shares it
  };
  std::vector<FrozenOnce> frozen_once;
  const std::vector<torch::jit::mobile::Function*> functions = functions_to_run(module);
  rewritten.reserve(functions.size()); // `original` points into it
  for (torch::jit::mobile::Function* function : functions) {
    auto& code = function->get_code();
    instructions_before += code.instructions_.size();
    if (is_method_of(*function, self)) { // otherwise nothing of its arguments is known
      rewritten.push_back({function, code});
      const size_t arguments = function->getSchema().arguments().size();
      // A model's methods often inline the same code (torchvision's forward and _forward_impl): the same
      // bytecode on the same module object freezes to the same program, so it is frozen once.
      const auto same = std::find_if(frozen_once.begin(), frozen_once.end(), [&](const FrozenOnce& f) {
        return f.arguments == arguments && same_bytecode(*f.original, code);
      });
      ++report.frozen_functions;
      if (same != frozen_once.end()) {
        ++report.shared_programs;
        code.types_ = same->original->types_; // the program numbers its types as the function it was made from
        same->program.for_same_bytecode(code).write_to(code);
        add_counts(report, same->counts);
      } else {
        AttributeFreezingReport counts;
        Program program = frozen(code, schema_of, self, arguments, folds, counts);
        program.write_to(code);
        add_counts(report, counts);
        frozen_once.push_back({&rewritten.back().original, arguments, std::move(program), counts});
      }
      if (std::getenv("LIGHTWEIGHT_DISPATCH_PRINT_FROZEN_BYTECODE") != nullptr) {
        print_bytecode(std::cerr, function->qualname().qualifiedName(), code);
      }
    }
    instructions_after += code.instructions_.size();
  }
  for (const Rewritten& r : rewritten) {
    const std::string why = why_a_constant_may_be_written(r.function->get_code(), schema_of);
    if (!why.empty() && refused.empty()) {
      refused = r.function->qualname().qualifiedName() + ": " + why;
    }
  }
  if (!refused.empty()) {
    for (Rewritten& r : rewritten) {
      r.function->get_code() = std::move(r.original);
    }
    AttributeFreezingReport kept;
    kept.kept_because = "after freezing, " + refused;
    return kept;
  }
  report.folded_weights = static_cast<int64_t>(folds.size());
  report.folded_in_place = write_folded_weights(folds, module);
  report.applied = report.attribute_reads > 0 || report.folded_batch_norms > 0 || report.constant_branches > 0 ||
                   report.computed_calls > 0 || report.removed_dropouts > 0;
  report.removed_instructions = static_cast<int64_t>(instructions_before) - static_cast<int64_t>(instructions_after);
  return report;
}

} // namespace lightweight_dispatch
