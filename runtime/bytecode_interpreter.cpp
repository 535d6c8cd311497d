#include <runtime/bytecode_interpreter.h>

#include <runtime/op_binding.h>

#include <ATen/core/function.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/mobile/function.h>
#include <torch/csrc/jit/mobile/interpreter.h>
#include <torch/csrc/jit/runtime/instruction.h>

#include <sstream>

namespace lightweight_dispatch {

namespace {

using torch::jit::Instruction;
using torch::jit::Stack;
using torch::jit::mobile::Code;
namespace opcode = torch::jit;

// Opcodes this interpreter runs itself; every other one goes to the stock interpreter.
bool runs_natively(opcode::OpCode op) {
  switch (op) {
    case opcode::OP:
    case opcode::OPN:
    case opcode::CALL:
    case opcode::INTERFACE_CALL:
    case opcode::LOAD:
    case opcode::MOVE:
    case opcode::STORE:
    case opcode::STOREN:
    case opcode::DROP:
    case opcode::DROPR:
    case opcode::LOADC:
    case opcode::GET_ATTR:
    case opcode::JF:
    case opcode::JMP:
    case opcode::LOOP:
    case opcode::RET:
    case opcode::LIST_CONSTRUCT:
    case opcode::TUPLE_CONSTRUCT:
      return true;
    default:
      return false;
  }
}

std::string describe_instruction(const Code& code, size_t pc) {
  std::ostringstream out;
  const Instruction& inst = code.instructions_[pc];
  out << "instruction " << pc << " (" << opcode_name(inst.op);
  if ((inst.op == opcode::OP || inst.op == opcode::OPN) && inst.X >= 0 &&
      static_cast<size_t>(inst.X) < code.op_names_.size()) {
    out << " " << op_display_name(code.op_names_[inst.X]);
  }
  out << ")";
  return out.str();
}

// Why `code`'s instruction at `pc` cannot run unchecked, or an empty string when it can.
std::string operand_problem(const Code& code, size_t pc) {
  const Instruction& inst = code.instructions_[pc];
  const size_t size = code.instructions_.size();
  const auto in = [](int64_t value, int64_t low, int64_t high) { return value >= low && value <= high; };
  const auto num_registers = static_cast<int64_t>(code.register_size_);
  const auto last = static_cast<int64_t>(size) - 1;
  const auto target = static_cast<int64_t>(pc) + inst.X;
  switch (inst.op) {
    case opcode::OP:
    case opcode::OPN:
      if (!in(inst.X, 0, static_cast<int64_t>(code.operators_.size()) - 1) ||
          code.op_names_.size() != code.operators_.size()) {
        return "operator index " + std::to_string(inst.X) + " is out of range";
      }
      if (!code.operators_[inst.X]) {
        return "its operator is not bound";
      }
      break;
    case opcode::CALL:
      if (!in(inst.X, 0, static_cast<int64_t>(code.functions_.size()) - 1) || !code.functions_[inst.X]) {
        return "function index " + std::to_string(inst.X) + " names no function";
      }
      break;
    case opcode::INTERFACE_CALL:
      if (!in(inst.X, 0, static_cast<int64_t>(code.constants_.size()) - 1) || !code.constants_[inst.X].isString()) {
        return "method name constant " + std::to_string(inst.X) + " is not a string constant";
      }
      if (inst.N == 0) {
        return "it passes no object to call the method on";
      }
      break;
    case opcode::LOAD:
    case opcode::MOVE:
    case opcode::STORE:
    case opcode::DROPR:
      if (!in(inst.X, 1, num_registers)) {
        return "register " + std::to_string(inst.X) + " is outside the function's " +
            std::to_string(num_registers) + " registers";
      }
      break;
    case opcode::STOREN:
      if (!in(inst.X, 1, num_registers) || !in(static_cast<int64_t>(inst.X) + inst.N - 1, 0, num_registers)) {
        return "registers " + std::to_string(inst.X) + ".." + std::to_string(inst.X + inst.N - 1) +
            " are outside the function's " + std::to_string(num_registers) + " registers";
      }
      break;
    case opcode::LOADC:
      if (!in(inst.X, 0, static_cast<int64_t>(code.constants_.size()) - 1)) {
        return "constant index " + std::to_string(inst.X) + " is out of range";
      }
      break;
    case opcode::GET_ATTR:
      if (inst.X < 0) {
        return "attribute slot " + std::to_string(inst.X) + " is negative";
      }
      break;
    case opcode::JF:
    case opcode::JMP:
      if (!in(target, 0, last)) {
        return "its jump target " + std::to_string(target) + " is outside the function";
      }
      break;
    case opcode::LOOP:
      if (!in(target, 0, last) || inst.N < 2) {
        return "its exit target " + std::to_string(target) + " or loop-carried count is invalid";
      }
      break;
    case opcode::LIST_CONSTRUCT:
      if (!in(inst.X, 0, static_cast<int64_t>(code.types_.size()) - 1) ||
          code.types_[inst.X]->containedTypeSize() != 1) {
        return "type index " + std::to_string(inst.X) + " names no list type";
      }
      break;
    default:
      break;
  }
  const bool ends_flow = inst.op == opcode::RET || inst.op == opcode::JMP;
  if (!ends_flow && static_cast<int64_t>(pc) + 1 > last) {
    return "it is the function's last instruction but does not return";
  }
  return {};
}

// A program of the one instruction at `pc` followed by RET, with what that instruction may read
// (types for the constructing instructions, the debug handle for error reports).
std::unique_ptr<Code> one_instruction_program(const Code& code, size_t pc) {
  auto program = std::make_unique<Code>();
  program->instructions_ = {code.instructions_[pc], Instruction(opcode::RET, 0, 0)};
  if (pc < code.debug_handles_.size()) {
    program->debug_handles_ = {code.debug_handles_[pc], code.debug_handles_[pc]};
  }
  program->types_ = code.types_;
  program->initialized = true;
  return program;
}

void construct_list(Stack& stack, const c10::Type& list_type, size_t count) {
  c10::impl::GenericList list(list_type.containedType(0));
  list.reserve(count);
  for (auto it = stack.end() - static_cast<std::ptrdiff_t>(count); it != stack.end(); ++it) {
    list.push_back(std::move(*it));
  }
  torch::jit::drop(stack, count);
  stack.emplace_back(std::move(list));
}

void construct_tuple(Stack& stack, size_t count) {
  std::vector<c10::IValue> elements(
      std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(count)),
      std::make_move_iterator(stack.end()));
  torch::jit::drop(stack, count);
  stack.emplace_back(c10::ivalue::Tuple::create(std::move(elements)));
}

struct Frame {
  const Code* code;
  size_t pc;
};

} // namespace

BytecodeInterpreter::BytecodeInterpreter(const torch::jit::mobile::Module& module, const std::string& method_name)
    : self_(module._ivalue()) {
  const torch::jit::mobile::Function* method = find_model_method(module, method_name);
  if (method == nullptr) {
    throw BytecodeError("the model has no method '" + method_name + "'");
  }
  for (const torch::jit::mobile::Function* function : functions_to_run(module)) {
    prepare(*function);
  }
  entry_ = &method->get_code();
}

void BytecodeInterpreter::prepare(const torch::jit::mobile::Function& function) {
  const Code& code = function.get_code();
  PreparedCode prepared_code;
  prepared_code.function_name = function.qualname().qualifiedName();
  if (code.instructions_.empty()) {
    throw BytecodeError("function " + prepared_code.function_name + " has no instructions");
  }
  prepared_code.delegated.resize(code.instructions_.size());
  for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
    const std::string problem = operand_problem(code, pc);
    if (!problem.empty()) {
      throw BytecodeError(
          "function " + prepared_code.function_name + ", " + describe_instruction(code, pc) + ": " + problem);
    }
    if (!runs_natively(code.instructions_[pc].op)) {
      prepared_code.delegated[pc] = one_instruction_program(code, pc);
    }
  }
  codes_.emplace(&code, std::move(prepared_code));
}

const BytecodeInterpreter::PreparedCode& BytecodeInterpreter::prepared(const Code& code) const {
  const auto it = codes_.find(&code);
  TORCH_CHECK(it != codes_.end(), "a call reached a function whose bytecode was not prepared");
  return it->second;
}

c10::IValue BytecodeInterpreter::run(std::vector<c10::IValue> inputs) const {
  Stack stack;
  stack.reserve(inputs.size() + 16);
  stack.emplace_back(self_);
  for (auto& input : inputs) {
    stack.push_back(std::move(input));
  }
  execute(stack);
  return std::move(stack.front());
}

// The loop keeps the running frame's code, registers and pc in locals and writes the pc back to its
// Frame only when control leaves the frame (a call) or an error needs it.
void BytecodeInterpreter::execute(Stack& stack) const {
  std::vector<Frame> frames;
  std::vector<c10::IValue> registers;
  const bool record_ops = at::hasCallbacks();

  const Code* code = nullptr;
  size_t pc = 0;
  c10::IValue* registers_end = nullptr;
  const auto enter = [&](const Code& callee) {
    registers.resize(registers.size() + callee.register_size_);
    frames.push_back({&callee, 0});
  };
  const auto resume_top_frame = [&] {
    code = frames.back().code;
    pc = frames.back().pc;
    registers_end = registers.data() + registers.size();
  };
  // Calls `function`; a bytecode function becomes the running frame, a built-in one runs right away.
  const auto call = [&](torch::jit::Function& function) {
    frames.back().pc = pc + 1;
    function.call(stack, [&](const Code& callee) {
      prepared(callee); // refuses code that was not checked
      enter(callee);
    });
    resume_top_frame();
  };
  const auto reg = [&](int32_t index) -> c10::IValue& { return *(registers_end - index); };
  // For RecordFunction events, as the stock loop reports them.
  const auto debug_handle = [&] { return pc < code->debug_handles_.size() ? code->debug_handles_[pc] : int64_t(pc); };

  enter(*entry_);
  resume_top_frame();
  try {
    while (true) {
      const Instruction inst = code->instructions_[pc];
      switch (inst.op) {
        case opcode::OP:
          if (C10_UNLIKELY(record_ops)) {
            RECORD_EDGE_SCOPE_WITH_DEBUG_HANDLE_AND_INPUTS(code->op_names_[inst.X].name, debug_handle(), stack);
            code->operators_[inst.X](stack);
          } else {
            code->operators_[inst.X](stack);
          }
          ++pc;
          break;
        case opcode::OPN:
          stack.emplace_back(static_cast<int64_t>(inst.N));
          if (C10_UNLIKELY(record_ops)) {
            RECORD_EDGE_SCOPE_WITH_DEBUG_HANDLE_AND_INPUTS(code->op_names_[inst.X].name, debug_handle(), stack);
            code->operators_[inst.X](stack);
          } else {
            code->operators_[inst.X](stack);
          }
          ++pc;
          break;
        case opcode::CALL:
          call(*code->functions_[inst.X]);
          break;
        case opcode::INTERFACE_CALL: {
          TORCH_CHECK(inst.N <= stack.size(), "INTERFACE_CALL with ", inst.N, " arguments on a shorter stack");
          torch::jit::Function& method = torch::jit::peek(stack, 0, inst.N)
                                             .toObject()
                                             ->type()
                                             ->getMethod(code->constants_[inst.X].toStringRef());
          if (C10_UNLIKELY(record_ops)) {
            // As the stock loop does: an event named after the method, around the call (which, for a
            // bytecode method, only enters its frame).
            RECORD_EDGE_SCOPE_WITH_DEBUG_HANDLE_AND_INPUTS(method.name(), debug_handle(), stack);
            call(method);
          } else {
            call(method);
          }
        } break;
        case opcode::LOAD:
          stack.emplace_back(reg(inst.X));
          ++pc;
          break;
        case opcode::MOVE:
          stack.emplace_back(std::move(reg(inst.X)));
          ++pc;
          break;
        case opcode::STORE:
          reg(inst.X) = std::move(stack.back());
          stack.pop_back();
          ++pc;
          break;
        case opcode::STOREN:
          for (int32_t i = inst.N; i > 0; --i) {
            reg(inst.X + i - 1) = std::move(stack.back());
            stack.pop_back();
          }
          ++pc;
          break;
        case opcode::DROP:
          stack.pop_back();
          ++pc;
          break;
        case opcode::DROPR:
          reg(inst.X) = c10::IValue();
          ++pc;
          break;
        case opcode::LOADC:
          stack.emplace_back(code->constants_[inst.X]);
          ++pc;
          break;
        case opcode::GET_ATTR: {
          auto object = std::move(stack.back()).toObject();
          stack.back() = object->getSlot(inst.X);
          ++pc;
        } break;
        case opcode::JF: {
          const bool condition = stack.back().toBool();
          stack.pop_back();
          pc += condition ? 1 : inst.X;
        } break;
        case opcode::JMP:
          pc += inst.X;
          break;
        case opcode::LOOP: {
          // Stack: trip count, max trip count, condition, then the loop-carried values.
          const auto loop_frame = stack.end() - (inst.N + 1);
          const int64_t trip_count = loop_frame[0].toInt();
          if (trip_count < loop_frame[1].toInt() && loop_frame[2].toBool()) {
            loop_frame[2] = trip_count;
            loop_frame[0] = trip_count + 1;
            ++pc;
          } else {
            for (size_t i = 0; i < static_cast<size_t>(inst.N) - 2; ++i) {
              loop_frame[i] = std::move(loop_frame[i + 3]);
            }
            torch::jit::drop(stack, 3);
            pc += inst.X;
          }
        } break;
        case opcode::RET:
          registers.resize(registers.size() - code->register_size_);
          frames.pop_back();
          if (frames.empty()) {
            return;
          }
          resume_top_frame();
          break;
        case opcode::LIST_CONSTRUCT:
          construct_list(stack, *code->types_[inst.X], inst.N);
          ++pc;
          break;
        case opcode::TUPLE_CONSTRUCT:
          construct_tuple(stack, inst.X);
          ++pc;
          break;
        default:
          torch::jit::mobile::InterpreterState(*prepared(*code).delegated[pc]).run(stack);
          ++pc;
          break;
      }
    }
  } catch (c10::Error& error) {
    error.add_context("while running " + prepared(*code).function_name + ", " + describe_instruction(*code, pc));
    throw;
  }
}

} // namespace lightweight_dispatch
