#include <bind_time/weight_sites.h>

#include <bind_time/symbolic_stack.h>
#include <runtime/op_binding.h>

#include <torch/csrc/jit/runtime/instruction.h>

#include <algorithm>
#include <map>
#include <set>
#include <optional>
#include <stdexcept>
#include <utility>

namespace lightweight_dispatch {

namespace {

using torch::jit::Instruction;
namespace opcode = torch::jit;

std::optional<SiteOp> site_op(const std::string& op) {
  if (op == "aten::conv2d") {
    return SiteOp::Conv2d;
  }
  if (op == "aten::linear") {
    return SiteOp::Linear;
  }
  return std::nullopt;
}

// The arguments the schema has: conv2d's seven, linear's three.
int64_t schema_arguments(SiteOp op) {
  return op == SiteOp::Conv2d ? 7 : 3;
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

// conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) or linear(input, weight,
// bias=None): the constants after input.
std::optional<WeightSite> constant_arguments(const torch::jit::mobile::Code& code, size_t pc, SiteOp op) {
  const int64_t given = pushed_arguments(code, code.instructions_[pc], schema_arguments(op));
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
  WeightSite site;
  site.op = op;
  site.conv_instruction = pc;
  for (const c10::IValue* arg : args) {
    site.conv_arguments.push_back(*arg);
  }
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
  if (op == SiteOp::Linear) {
    return site;
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

// The elementwise operators a site's result can go through inside its kernel, by operator name.
// With the number of arguments its schema has (the input first).
struct ElementwiseOp {
  PostOp op;
  int64_t schema_arguments;
};

std::optional<ElementwiseOp> elementwise_post_op(const std::string& op) {
  static const std::map<std::string, ElementwiseOp> by_name = {
      {"aten::relu", {PostOp::Relu, 1}}, {"aten::relu_", {PostOp::Relu, 1}},
      {"aten::hardtanh", {PostOp::Hardtanh, 3}}, {"aten::hardtanh_", {PostOp::Hardtanh, 3}},
      {"aten::silu", {PostOp::Silu, 1}}, {"aten::silu_", {PostOp::Silu, 1}},
      {"aten::sigmoid", {PostOp::Sigmoid, 1}}, {"aten::sigmoid_", {PostOp::Sigmoid, 1}},
      {"aten::hardswish", {PostOp::Hardswish, 1}}, {"aten::hardswish_", {PostOp::Hardswish, 1}},
      {"aten::tanh", {PostOp::Tanh, 1}}, {"aten::tanh_", {PostOp::Tanh, 1}},
      {"aten::gelu", {PostOp::Gelu, 2}}, {"aten::gelu_", {PostOp::Gelu, 2}},
  };
  const auto found = by_name.find(op);
  return found == by_name.end() ? std::nullopt : std::optional<ElementwiseOp>(found->second);
}

// Whether `inst` calls add.Tensor or add_.Tensor with alpha left at 1 (two arguments given).
bool is_residual_add(const torch::jit::mobile::Code& code, const Instruction& inst) {
  const std::string op = operator_at(code, inst);
  return (op == "aten::add.Tensor" || op == "aten::add_.Tensor") && pushed_arguments(code, inst, 3) == 2;
}

bool pushes_register(const Instruction& inst) {
  return inst.op == opcode::LOAD || inst.op == opcode::MOVE;
}

// A residual add at `at` whose other operand comes from a register, or nullopt:
//   LOAD/MOVE r; add(result, r)                     (ResidualPush::AfterCall)
//   STORE t; LOAD/MOVE r; MOVE t; add(r, result)     (ResidualPush::UnderResult; t only holds the result meanwhile)
// No operator runs in between, so the call may as well run at the add, on the same input.
std::optional<FusedPostOp> register_residual_add_at(const torch::jit::mobile::Code& code, size_t at) {
  const auto& instructions = code.instructions_;
  auto add_at = [&](size_t pc, ResidualPush push) -> std::optional<FusedPostOp> {
    if (pc >= instructions.size() || !is_residual_add(code, instructions[pc])) {
      return std::nullopt;
    }
    FusedPostOp fused;
    fused.op = PostOp::Add;
    fused.instruction = pc;
    fused.operator_name = operator_at(code, instructions[pc]);
    fused.residual_push = push;
    // add_(result, r) writes the site's own fresh result, which only the add sees; add_(r, result) writes r.
    fused.writes_residual = push == ResidualPush::UnderResult && fused.operator_name == "aten::add_.Tensor";
    return fused;
  };
  if (at < instructions.size() && pushes_register(instructions[at])) {
    return add_at(at + 1, ResidualPush::AfterCall);
  }
  if (at + 2 < instructions.size() && instructions[at].op == opcode::STORE && pushes_register(instructions[at + 1]) &&
      instructions[at + 2].op == opcode::MOVE && instructions[at + 2].X == instructions[at].X &&
      instructions[at + 1].X != instructions[at].X) {
    return add_at(at + 3, ResidualPush::UnderResult);
  }
  return std::nullopt;
}

// The operation at instruction `at` fused onto the value on top of the stack (the site's result so far), or
// nullopt: an elementwise operator of that value alone, its other arguments constants pushed right before it
// (hardtanh's bounds, gelu's approximate 'none'), or a residual add with alpha left at 1: add(beneath, it),
// add_(beneath, it), or one whose other operand comes from a register (register_residual_add_at).
std::optional<FusedPostOp> post_op_at(const torch::jit::mobile::Code& code, size_t at) {
  const auto& instructions = code.instructions_;
  if (std::optional<FusedPostOp> from_register = register_residual_add_at(code, at)) {
    return from_register;
  }
  // At most two constants come before the operator: try each count.
  for (size_t constants = 0; constants <= 2 && at + constants < instructions.size(); ++constants) {
    const Instruction& call = instructions[at + constants];
    const std::string op = operator_at(code, call);
    if (op.empty()) {
      if (call.op != opcode::LOADC) {
        return std::nullopt;
      }
      continue;
    }
    FusedPostOp fused;
    fused.instruction = at + constants;
    fused.operator_name = op;
    for (size_t i = 0; i < constants; ++i) {
      const c10::IValue* constant = constant_pushed_by(code, instructions[at + i]);
      if (constant == nullptr) {
        return std::nullopt;
      }
      fused.arguments.push_back(*constant);
    }
    if (is_residual_add(code, call)) {
      if (constants != 0) {
        return std::nullopt;
      }
      fused.op = PostOp::Add;
      fused.residual_push = ResidualPush::BeforeCall;
      fused.writes_residual = op == "aten::add_.Tensor"; // add_(beneath, result)
      return fused;
    }
    const std::optional<ElementwiseOp> kind = elementwise_post_op(op);
    if (!kind || pushed_arguments(code, call, kind->schema_arguments) != static_cast<int64_t>(constants) + 1) {
      return std::nullopt;
    }
    fused.op = kind->op;
    if (fused.op == PostOp::Hardtanh) {
      if (constants != 2 || !fused.arguments[0].isScalar() || !fused.arguments[1].isScalar()) {
        return std::nullopt;
      }
      fused.clamp_min = fused.arguments[0].toScalar().toDouble();
      fused.clamp_max = fused.arguments[1].toScalar().toDouble();
      return fused;
    }
    if (fused.op == PostOp::Gelu) {
      const bool erf_form = constants == 0 || (constants == 1 && fused.arguments[0].isString() &&
                                                  fused.arguments[0].toStringRef() == "none");
      return erf_form ? std::optional<FusedPostOp>(fused) : std::nullopt;
    }
    return constants == 0 ? std::optional<FusedPostOp>(fused) : std::nullopt;
  }
  return std::nullopt;
}

// The operations right after the call that consume its result at once, one after another, while they are ones we
// can fuse (at most one residual add), and no jump lands among them.
void find_post_ops(const torch::jit::mobile::Code& code, const std::set<size_t>& jump_targets, WeightSite& site) {
  size_t next = site.conv_instruction + 1;
  while (std::optional<FusedPostOp> fused = post_op_at(code, next)) {
    if ((fused->op == PostOp::Add && site.adds()) || lands_inside(jump_targets, next, fused->instruction)) {
      return;
    }
    next = fused->instruction + 1;
    site.post_ops.push_back(std::move(*fused));
  }
}

} // namespace

const char* post_op_name(PostOp op) {
  switch (op) {
    case PostOp::Relu:
      return "relu";
    case PostOp::Hardtanh:
      return "hardtanh";
    case PostOp::Silu:
      return "silu";
    case PostOp::Sigmoid:
      return "sigmoid";
    case PostOp::Hardswish:
      return "hardswish";
    case PostOp::Tanh:
      return "tanh";
    case PostOp::Gelu:
      return "gelu";
    case PostOp::Add:
      return "add";
  }
  return "?";
}

bool WeightSite::adds() const {
  return residual_add() != nullptr;
}

const FusedPostOp* WeightSite::residual_add() const {
  const auto found =
      std::find_if(post_ops.begin(), post_ops.end(), [](const FusedPostOp& p) { return p.op == PostOp::Add; });
  return found == post_ops.end() ? nullptr : &*found;
}

bool WeightSite::runs_at_add() const {
  const FusedPostOp* add = residual_add();
  return add != nullptr && add->residual_push != ResidualPush::BeforeCall;
}

size_t WeightSite::kernel_instruction() const {
  return runs_at_add() ? residual_add()->instruction : conv_instruction;
}

bool WeightSite::only_clamping_post_ops() const {
  return std::all_of(post_ops.begin(), post_ops.end(),
      [](const FusedPostOp& p) { return p.op == PostOp::Relu || p.op == PostOp::Hardtanh; });
}

std::vector<WeightSite> find_weight_sites(const torch::jit::mobile::Code& code) {
  std::vector<WeightSite> sites;
  const auto targets = jump_targets(code.instructions_);
  for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
    const std::optional<SiteOp> op = site_op(operator_at(code, code.instructions_[pc]));
    if (!op) {
      continue;
    }
    std::optional<WeightSite> site = constant_arguments(code, pc, *op);
    if (!site) {
      continue;
    }
    const size_t first_argument =
        pc + 1 - static_cast<size_t>(pushed_arguments(code, code.instructions_[pc], schema_arguments(*op)));
    if (lands_inside(targets, first_argument + 1, pc)) {
      continue;
    }
    find_post_ops(code, targets, *site); // none a jump reaches: those are reached from elsewhere too
    sites.push_back(std::move(*site));
  }
  return sites;
}

std::vector<int64_t> site_output_sizes(const WeightSite& site, c10::IntArrayRef input) {
  if (site.op == SiteOp::Linear) {
    std::vector<int64_t> sizes = input.vec();
    sizes.back() = site.weight.size(0);
    return sizes;
  }
  std::vector<int64_t> sizes = {input[0], site.weight.size(0)};
  for (int d = 0; d < 2; ++d) {
    const int64_t kernel = site.dilation[d] * (site.weight.size(2 + d) - 1) + 1;
    sizes.push_back((input[2 + d] + 2 * site.padding[d] - kernel) / site.stride[d] + 1);
  }
  return sizes;
}

bool pointwise_feeds_grouped_3x3(const WeightSite& first, const WeightSite& second) {
  const auto ones = std::vector<int64_t>{1, 1};
  const auto zeros = std::vector<int64_t>{0, 0};
  if (first.op != SiteOp::Conv2d || second.op != SiteOp::Conv2d) {
    return false;
  }
  const bool pointwise = first.weight.dim() == 4 && first.weight.size(2) == 1 && first.weight.size(3) == 1 &&
                         first.groups == 1 && first.stride == ones && first.padding == zeros && first.dilation == ones &&
                         !first.adds();
  const int64_t channels = first.weight.size(0);
  const bool grouped_3x3 = second.weight.dim() == 4 && second.weight.size(2) == 3 && second.weight.size(3) == 3 &&
                           second.groups > 1 && second.weight.size(1) * second.groups == channels &&
                           second.dilation == ones && second.padding == ones;
  return pointwise && grouped_3x3;
}

bool is_depthwise(const WeightSite& site) {
  return site.op == SiteOp::Conv2d && site.weight.dim() == 4 && site.weight.size(1) == 1 && site.groups > 1 &&
         site.weight.size(0) == site.groups;
}

bool is_layout_sensitive(const std::string& op_name) {
  static const std::set<std::string> sensitive = {
      "aten::view", "aten::view_as", "aten::as_strided", "aten::_reshape_alias", "aten::_unsafe_view",
      "aten::stride", "aten::is_contiguous", "aten::unfold"};
  return sensitive.count(op_name.substr(0, op_name.find('.'))) != 0;
}

namespace {

// The symbolic stack machine: every value is the site that produced it, or -1.
class SiteValueTracker {
 public:
  SiteValueTracker(const torch::jit::mobile::Code& code, const std::vector<WeightSite>& sites,
      const ReturnCount& returns_of, bool writes_nothing, const std::set<size_t>& any_layout_calls,
      const std::set<size_t>& checked_layout_calls)
      : code_(code), returns_of_(returns_of), writes_nothing_(writes_nothing), any_layout_calls_(any_layout_calls),
        checked_layout_calls_(checked_layout_calls), sites_(static_cast<int>(sites.size())),
        values_(code.register_size_, -1) {
    flow_.feeds_only_sites.assign(sites.size(), false);
    flow_.input_origins.assign(sites.size(), {});
    flow_.residual_origins.assign(sites.size(), {});
    flow_.residual_dies_at_add.assign(sites.size(), false);
    written_residual_.assign(sites.size(), -1);
    flow_.sole_consumer.assign(sites.size(), -1);
    uses_.assign(sites.size(), 0);
    seen_elsewhere_.assign(sites.size(), false);
    escaped_.assign(sites.size(), false);
    escaped_elsewhere_.assign(sites.size(), false);
    for (size_t i = 0; i < sites.size(); ++i) {
      conv_at_[sites[i].conv_instruction] = static_cast<int>(i);
      for (const FusedPostOp& fused : sites[i].post_ops) {
        post_op_at_[fused.instruction] = {static_cast<int>(i), &fused};
      }
    }
  }

  SiteDataflow run() && {
    size_t pc = 0;
    for (; pc < code_.instructions_.size(); ++pc) {
      if (!step(pc, code_.instructions_[pc])) {
        break;
      }
    }
    // Whatever is still alive (returned, or used past where the trace stopped), and every site not reached, escapes.
    for (int value : values_.stack()) {
      escape(value);
    }
    for (int value : values_.registers()) {
      escape(value);
    }
    for (const auto& [instruction, site] : conv_at_) {
      if (instruction >= pc) {
        escaped_[site] = escaped_elsewhere_[site] = seen_elsewhere_[site] = true;
      }
    }
    flow_.escapes_only_to_layout_free_ops.assign(escaped_.size(), false);
    for (size_t i = 0; i < escaped_.size(); ++i) {
      flow_.feeds_only_sites[i] = used_.count(static_cast<int>(i)) != 0 && !escaped_[i];
      flow_.escapes_only_to_layout_free_ops[i] = !escaped_elsewhere_[i];
      if (seen_elsewhere_[i] || uses_[i] != 1) {
        flow_.sole_consumer[i] = -1;
      }
      const int written = written_residual_[i];
      flow_.residual_dies_at_add[i] =
          written >= 0 && written < sites_ && uses_[written] == 1 && !seen_elsewhere_[written];
    }
    return std::move(flow_);
  }

 private:
  // A use by something other than a site: `op` names the operator, "" an instruction or a use past the trace.
  void escape(int value, const std::string& op = "") {
    if (value >= sites_) { // computed from sites' results: each of them escapes
      for (int origin : origins(value)) {
        escape(origin, op);
      }
      return;
    }
    if (value < 0) {
      return;
    }
    seen_elsewhere_[value] = true; // even by a size query: a site run inside its consumer has no sizes of its own
    if (is_layout_neutral(op)) {
      return;
    }
    escaped_[value] = true;
    if (!is_layout_free(op)) {
      escaped_elsewhere_[value] = true;
    }
  }
  // Takes a channels_last tensor at no more cost than the conv saves by producing it: a permute (an SSD head's
  // permute-reshape of a channels_last result is a view where the stock layout's is a copy), a list append (a
  // detection head collecting its levels' maps), a reshape (a copy where the stock layout's may be a view, but
  // cheaper than the conv's own reorder: SSD heads 0.28 -> 0.27 ms, the larger one 1.84 -> 1.68). Only where
  // nothing in the function writes a tensor: what these results reach is not traced, and a reshape or flatten
  // of a channels_last tensor (or of anything computed from one) copies where the stock layout's views, so a
  // write through it would no longer reach the value it came from.
  bool is_layout_free(const std::string& op) const {
    return writes_nothing_ && (op == "aten::permute" || op == "aten::append.t" || op == "aten::reshape");
  }
  // Reads no data: sizes are the same in any layout.
  static bool is_layout_neutral(const std::string& op) {
    return op.rfind("aten::size", 0) == 0 || op == "aten::dim" || op == "aten::numel";
  }
  // `consumer`: the site whose input `value` is, or -1 for another use by a site (a fused add's operand).
  void use_by_site(int value, int consumer) {
    if (value >= sites_) { // through layout-following operations: no site is its only consumer
      for (int origin : origins(value)) {
        use_by_following_call(origin);
      }
      return;
    }
    if (value >= 0) {
      used_.insert(value);
      ++uses_[value];
      flow_.sole_consumer[value] = consumer;
    }
  }
  // A use by a layout-following operation or a layout-checked call: no escape, but not a site's only input.
  void use_by_following_call(int value) {
    for (int origin : origins(value)) {
      used_.insert(origin);
      seen_elsewhere_[origin] = true;
    }
  }
  // The sites a value is computed from: itself if it is a site's result; none for -1.
  std::vector<int> origins(int value) const {
    if (value < 0) {
      return {};
    }
    if (value < sites_) {
      return {value};
    }
    return derived_[static_cast<size_t>(value - sites_)];
  }
  // A value computed from these sites' results (or -1 if none): a new symbolic value.
  int derived_from(const std::vector<int>& inputs) {
    std::set<int> all;
    for (int value : inputs) {
      for (int origin : origins(value)) {
        all.insert(origin);
      }
    }
    if (all.empty()) {
      return -1;
    }
    derived_.emplace_back(all.begin(), all.end());
    return sites_ + static_cast<int>(derived_.size()) - 1;
  }


  // One instruction's effect; false where the trace stops.
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
          values_.push(-1);
          return true;
        case opcode::TUPLE_CONSTRUCT:
          return construct(static_cast<size_t>(inst.X));
        case opcode::LIST_UNPACK: // a list's elements (sizes, here): no site's
          escape(values_.pop());
          values_.push(static_cast<size_t>(inst.X), -1);
          return true;
        case opcode::LIST_CONSTRUCT:
        case opcode::DICT_CONSTRUCT:
          return construct(static_cast<size_t>(inst.N));
        case opcode::DIM:
          escape(values_.pop(), "aten::dim");
          values_.push(-1);
          return true;
        case opcode::FORMAT:
          return construct(static_cast<size_t>(inst.X));
        case opcode::JF:
          return raising_block_.enter(code_, pc, values_);
        case opcode::JMP:
          return raising_block_.steps_over(pc);
        case opcode::RAISE_EXCEPTION:
          return raising_block_.leave(pc, values_);
        default:
          return false; // jumps, calls, ...: the trace stops here
      }
    } catch (const std::out_of_range&) {
      return false; // bytecode this tracker does not follow: prove nothing past it
    }
  }

  bool construct(size_t inputs) {
    for (int value : values_.pop(inputs)) {
      escape(value);
    }
    values_.push(-1);
    return true;
  }

  bool call(size_t pc, const Instruction& inst) {
    const std::string name = op_display_name(code_.op_names_[inst.X]);
    const int given = inst.op == opcode::OPN ? static_cast<int>(inst.N) : code_.operator_input_sizes_[inst.X];
    if (given < 0) {
      return false;
    }
    const std::vector<int> inputs = values_.pop(static_cast<size_t>(given));
    if (const auto conv = conv_at_.find(pc); conv != conv_at_.end()) {
      use_by_site(inputs.at(0), conv->second);
      flow_.input_origins[conv->second] = origins(inputs.at(0));
      values_.push(conv->second);
      return true;
    }
    if (any_layout_calls_.count(pc) != 0 && !inputs.empty()) {
      // Its first argument in any layout, its result in that layout and traced on; the rest are its parameters.
      use_by_following_call(inputs[0]);
      flow_.any_layout_call_origins[pc] = origins(inputs[0]);
      for (size_t i = 1; i < inputs.size(); ++i) {
        escape(inputs[i], name);
      }
      values_.push(derived_from({inputs[0]}));
      return true;
    }
    if (const auto post = post_op_at_.find(pc); post != post_op_at_.end()) {
      // A fused operation: its result is the site's. A fused add's other operand (the residual: beneath, or on top
      // where it came from a register after the call) is the site's too; an elementwise operation's other
      // arguments are constants.
      const auto [site, fused] = post->second;
      if (fused->op == PostOp::Add && inputs.size() == 2) {
        const int residual = fused->residual_push == ResidualPush::AfterCall ? inputs[1] : inputs[0];
        use_by_site(residual, -1);
        flow_.residual_origins[site] = origins(residual);
        if (fused->writes_residual) {
          written_residual_[site] = residual;
        }
      }
      values_.push(site);
      return true;
    }
    if (checked_layout_calls_.count(pc) != 0 && !inputs.empty()) {
      // Its first argument in any layout, its result traced on; the rest are its parameters.
      use_by_following_call(inputs[0]);
      flow_.checked_call_origins[pc] = origins(inputs[0]);
      for (size_t i = 1; i < inputs.size(); ++i) {
        escape(inputs[i], name);
      }
      values_.push(derived_from({inputs[0]}));
      return true;
    }
    if (is_layout_following(name, given)) {
      for (int value : inputs) {
        use_by_following_call(value);
      }
      values_.push(derived_from(inputs));
      return true;
    }
    for (int value : inputs) {
      escape(value, name);
    }
    const std::optional<size_t> returns = returns_of_(name);
    if (!returns) {
      return false;
    }
    values_.push(*returns, -1);
    return true;
  }

  const torch::jit::mobile::Code& code_;
  const ReturnCount& returns_of_;
  bool writes_nothing_;
  const std::set<size_t>& any_layout_calls_;
  const std::set<size_t>& checked_layout_calls_;
  const int sites_; // values 0 .. sites_ - 1 are the sites' results; from sites_ on, values computed from them
  std::vector<std::vector<int>> derived_; // per value from sites_ on: the sites it is computed from
  SymbolicStack values_; // each value: the site that produced it, a value computed from sites (derived_), or -1
  RaisingBlockPassage raising_block_;
  std::map<size_t, int> conv_at_;
  std::map<size_t, std::pair<int, const FusedPostOp*>> post_op_at_; // a fused operation's instruction: its site, it
  std::vector<int> written_residual_; // per site whose fused add writes its residual: that value, or -1
  std::set<int> used_;
  std::vector<int> uses_;              // uses by sites
  std::vector<bool> seen_elsewhere_;   // used by anything but a site, a size query included
  std::vector<bool> escaped_;          // used by something other than a site
  std::vector<bool> escaped_elsewhere_; // ... other than a layout-free operator
  SiteDataflow flow_;
};

} // namespace

SiteDataflow trace_site_results(const torch::jit::mobile::Code& code, const std::vector<WeightSite>& sites,
    const ReturnCount& returns_of, bool writes_nothing, const std::set<size_t>& any_layout_calls,
    const std::set<size_t>& checked_layout_calls) {
  return SiteValueTracker(code, sites, returns_of, writes_nothing, any_layout_calls, checked_layout_calls).run();
}

bool is_layout_following(const std::string& op_name, int given_arguments) {
  static const std::map<std::string, int> arguments_given = {
      {"aten::add.Tensor", 2}, {"aten::add_.Tensor", 2}, {"aten::sub.Tensor", 2}, {"aten::sub_.Tensor", 2},
      {"aten::mul.Tensor", 2}, {"aten::mul_.Tensor", 2}, {"aten::relu", 1}, {"aten::relu_", 1},
      {"aten::hardtanh", 3}, {"aten::hardtanh_", 3}};
  const auto found = arguments_given.find(op_name);
  return found != arguments_given.end() && found->second == given_arguments;
}

} // namespace lightweight_dispatch
