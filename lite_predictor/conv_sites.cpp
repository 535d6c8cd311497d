#include <lite_predictor/conv_sites.h>

#include <lite_predictor/op_binding.h>

#include <torch/csrc/jit/runtime/instruction.h>

#include <set>

namespace lightweight_dispatch {

namespace {

using torch::jit::Instruction;
namespace opcode = torch::jit;

const char* const kConv2d = "aten::conv2d";

// Instructions some jump lands on: a site must not contain one, or its arguments come from several paths.
std::set<size_t> jump_targets(const std::vector<Instruction>& instructions) {
  std::set<size_t> targets;
  for (size_t pc = 0; pc < instructions.size(); ++pc) {
    const Instruction& inst = instructions[pc];
    if (inst.op == opcode::JF || inst.op == opcode::JMP || inst.op == opcode::LOOP) {
      targets.insert(static_cast<size_t>(static_cast<int64_t>(pc) + inst.X));
    }
  }
  return targets;
}

bool lands_inside(const std::set<size_t>& targets, size_t first, size_t last) {
  const auto found = targets.lower_bound(first);
  return found != targets.end() && *found <= last;
}

std::string operator_at(const torch::jit::mobile::Code& code, const Instruction& inst) {
  return inst.op == opcode::OP ? op_display_name(code.op_names_[inst.X]) : "";
}

// Arguments the call at `inst` was given (the bytecode's count; the schema's when it says "all").
int64_t pushed_arguments(const torch::jit::mobile::Code& code, const Instruction& inst, int64_t schema_count) {
  const int size = code.operator_input_sizes_[inst.X];
  return size < 0 ? schema_count : size;
}

const c10::IValue* constant_pushed_by(const torch::jit::mobile::Code& code, const Instruction& inst) {
  return inst.op == opcode::LOADC ? &code.constants_[inst.X] : nullptr;
}

std::optional<std::vector<int64_t>> int_list(const c10::IValue& value) {
  if (!value.isIntList()) {
    return std::nullopt;
  }
  return value.toIntVector();
}

// conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1): the constants after input.
std::optional<ConvSite> constant_conv_arguments(const torch::jit::mobile::Code& code, size_t pc) {
  const int64_t given = pushed_arguments(code, code.instructions_[pc], 7);
  if (given < 2 || static_cast<int64_t>(pc) < given - 1) {
    return std::nullopt;
  }
  std::vector<const c10::IValue*> args; // weight, bias, ... as pushed
  for (int64_t i = given - 1; i >= 1; --i) {
    const c10::IValue* constant = constant_pushed_by(code, code.instructions_[pc - i]);
    if (constant == nullptr) {
      return std::nullopt;
    }
    args.push_back(constant);
  }
  ConvSite site;
  site.conv_instruction = pc;
  if (!args[0]->isTensor()) {
    return std::nullopt;
  }
  site.weight = args[0]->toTensor();
  if (args.size() > 1 && !args[1]->isNone()) {
    if (!args[1]->isTensor()) {
      return std::nullopt;
    }
    site.bias = args[1]->toTensor();
  }
  const std::vector<std::vector<int64_t>> defaults = {{1, 1}, {0, 0}, {1, 1}};
  std::vector<std::vector<int64_t>*> lists = {&site.stride, &site.padding, &site.dilation};
  for (size_t i = 0; i < lists.size(); ++i) {
    if (args.size() > i + 2) {
      auto list = int_list(*args[i + 2]);
      if (!list) {
        return std::nullopt;
      }
      *lists[i] = *list;
    } else {
      *lists[i] = defaults[i];
    }
  }
  if (args.size() > 5) {
    if (!args[5]->isInt()) {
      return std::nullopt;
    }
    site.groups = args[5]->toInt();
  }
  return site;
}

// The operation right after the conv2d call that consumes its result at once, if it is one we can fuse.
void find_post_op(const torch::jit::mobile::Code& code, ConvSite& site) {
  const auto& instructions = code.instructions_;
  const size_t next = site.conv_instruction + 1;
  auto fuse = [&](PostOp op, size_t at, size_t constants) {
    site.post_op = op;
    site.post_op_instruction = at;
    site.post_op_operator = operator_at(code, instructions[at]);
    site.post_op_constants = constants;
    for (size_t i = 0; i < constants; ++i) {
      site.post_op_arguments.push_back(code.constants_[instructions[next + i].X]);
    }
  };
  if (next < instructions.size()) {
    const std::string op = operator_at(code, instructions[next]);
    if ((op == "aten::relu" || op == "aten::relu_") && pushed_arguments(code, instructions[next], 1) == 1) {
      fuse(PostOp::Relu, next, 0);
      return;
    }
    if (op == "aten::add.Tensor" && pushed_arguments(code, instructions[next], 3) == 2) {
      fuse(PostOp::Add, next, 0); // add(beneath, result), alpha 1
      return;
    }
  }
  if (next + 2 < instructions.size()) {
    const std::string op = operator_at(code, instructions[next + 2]);
    const c10::IValue* low = constant_pushed_by(code, instructions[next]);
    const c10::IValue* high = constant_pushed_by(code, instructions[next + 1]);
    if ((op == "aten::hardtanh" || op == "aten::hardtanh_") && pushed_arguments(code, instructions[next + 2], 3) == 3 &&
        low != nullptr && high != nullptr && low->isScalar() && high->isScalar()) {
      fuse(PostOp::Hardtanh, next + 2, 2);
      site.clamp_min = low->toScalar().toDouble();
      site.clamp_max = high->toScalar().toDouble();
    }
  }
}

} // namespace

const char* post_op_name(PostOp op) {
  switch (op) {
    case PostOp::None:
      return "none";
    case PostOp::Relu:
      return "relu";
    case PostOp::Hardtanh:
      return "hardtanh";
    case PostOp::Add:
      return "add";
  }
  return "?";
}

std::vector<ConvSite> find_conv_sites(const torch::jit::mobile::Code& code) {
  std::vector<ConvSite> sites;
  const auto targets = jump_targets(code.instructions_);
  for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
    if (operator_at(code, code.instructions_[pc]) != kConv2d) {
      continue;
    }
    std::optional<ConvSite> site = constant_conv_arguments(code, pc);
    if (!site) {
      continue;
    }
    const size_t first_argument = pc + 1 - static_cast<size_t>(pushed_arguments(code, code.instructions_[pc], 7));
    if (lands_inside(targets, first_argument + 1, pc)) {
      continue;
    }
    find_post_op(code, *site);
    if (site->post_op != PostOp::None && lands_inside(targets, pc + 1, site->post_op_instruction)) {
      site->post_op = PostOp::None; // the fused operation is reached from elsewhere too: keep it apart
      site->post_op_arguments.clear();
      site->post_op_constants = 0;
    }
    sites.push_back(std::move(*site));
  }
  return sites;
}

bool is_layout_sensitive(const std::string& op_name) {
  static const std::set<std::string> sensitive = {
      "aten::view", "aten::view_as", "aten::as_strided", "aten::_reshape_alias", "aten::_unsafe_view",
      "aten::stride", "aten::is_contiguous", "aten::unfold"};
  return sensitive.count(op_name.substr(0, op_name.find('.'))) != 0;
}

} // namespace lightweight_dispatch
