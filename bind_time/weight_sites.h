// Finding, in a function's bytecode, the conv2d and linear call sites the bind-time stage can serve better.
//
// A frozen model pushes every conv2d (linear) argument but the input with LOADC just before the call, so the
// weight, bias, stride, padding, dilation and groups are known at load. When the instructions right after the
// call consume its result at once (an activation on it, relu_, silu_, hardswish_, gelu..., or a residual add of it
// and a tensor pushed before the call or from a register right after it, or several of these in a row), those
// operations can run inside the same kernel: nothing else can see the intermediate values.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/mobile/code.h>

#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// The operator a site calls.
enum class SiteOp {
  Conv2d, // aten::conv2d(input, weight, bias, stride, padding, dilation, groups)
  Linear, // aten::linear(input, weight, bias)
};

// What a site's result goes through right away, in the same kernel: an elementwise operation on it, or the
// residual add onto the value beneath it.
enum class PostOp {
  Relu,      // aten::relu / relu_
  Hardtanh,  // aten::hardtanh / hardtanh_ with constant bounds (ReLU6: 0, 6)
  Silu,      // aten::silu / silu_ (x * sigmoid(x): EfficientNet's activation)
  Sigmoid,   // aten::sigmoid / sigmoid_
  Hardswish, // aten::hardswish / hardswish_ (MobileNetV3's activation)
  Tanh,      // aten::tanh / tanh_
  Gelu,      // aten::gelu / gelu_ with approximate 'none' (the erf form; a transformer's feed-forward)
  Add,       // aten::add.Tensor / add_.Tensor of the result and another tensor, alpha 1: a residual connection
};

// How a fused residual add's other operand (the residual) reaches it, which decides where the site's kernel runs
// and what it finds on the stack there.
enum class ResidualPush {
  // Pushed before the site's arguments, the add right after the call: add(residual, result). The kernel runs at
  // the call, the residual beneath its input: [residual, input, constants...].
  BeforeCall,
  // Pushed by a LOAD or MOVE of a register right after the call: add(result, residual) (`out += identity`). The
  // kernel runs at the add, the call only passing its input on: [input, residual].
  AfterCall,
  // The result stored to a register, the residual pushed from another, the result moved back: add(residual,
  // result) (`out += self.downsample(x)`). The kernel runs at the add: [residual, input].
  UnderResult,
};

const char* post_op_name(PostOp op);

// One operation fused after a site's call: its instruction, and the constants pushed for it after the result.
struct FusedPostOp {
  PostOp op = PostOp::Relu;
  size_t instruction = 0; // the OP instruction
  std::string operator_name; // "aten::hardtanh_"
  double clamp_min = 0, clamp_max = 0; // Hardtanh's bounds
  // The constants pushed after the result (Hardtanh's bounds, gelu's 'none'): the instruction drops them once the
  // site ran it, and the generated path pushes them again.
  std::vector<c10::IValue> arguments;
  // An Add's: where the residual comes from, and whether the add writes it in place (add_(residual, result): the
  // residual's tensor is then the result, which is safe to compute into a new tensor only where nothing else ever
  // sees the residual; SiteDataflow::residual_dies_at_add says).
  ResidualPush residual_push = ResidualPush::BeforeCall;
  bool writes_residual = false;
};

// One conv2d or linear call whose arguments after the input are bytecode constants.
struct WeightSite {
  SiteOp op = SiteOp::Conv2d;
  size_t conv_instruction = 0; // the OP instruction calling the operator
  std::vector<c10::IValue> conv_arguments; // the constants pushed after the input, as pushed (weight, bias, ...)
  at::Tensor weight;
  std::optional<at::Tensor> bias;
  std::vector<int64_t> stride, padding, dilation; // conv2d's
  int64_t groups = 1;

  const char* op_name() const {
    return op == SiteOp::Conv2d ? "aten::conv2d" : "aten::linear";
  }

  // The operations right after the call, in order, each consuming the one before's result at once (at most one
  // Add among them); empty if none.
  std::vector<FusedPostOp> post_ops;

  // Whether a residual add is among the post-ops: the kernel then takes the residual too.
  bool adds() const;
  // The residual add among the post-ops, or null.
  const FusedPostOp* residual_add() const;
  // Whether the kernel runs at the residual add's instruction rather than at the call (ResidualPush::AfterCall
  // and UnderResult), the call then only passing its input on.
  bool runs_at_add() const;
  // The instruction the site's kernel is bound to: its call's, or its residual add's.
  size_t kernel_instruction() const;
  // Whether every post-op is a ReLU or a clamp: a 1x1 conv with only these, run in one kernel with the depthwise
  // conv it feeds, was measured faster than the two kernels at every shape tried; with another activation (SiLU,
  // hardswish) the pair wins at some shapes and loses at others, so it is timed against them per shape.
  bool only_clamping_post_ops() const;
};

// The site's result sizes for an input of `input` sizes (a conv's in NCHW order, whatever the layout).
std::vector<int64_t> site_output_sizes(const WeightSite& site, c10::IntArrayRef input);

// Sites run as one kernel, each site's result the next one's input (no one else sees it); one site alone, or a
// 1x1 conv and the depthwise conv it feeds.
using SiteChain = std::vector<const WeightSite*>;

// Whether `second` may join `first` in one kernel, given that `first`'s result is `second`'s input and nothing
// else's: `first` a pointwise (1x1, stride 1, no padding, ungrouped) conv with no add fused, `second` a grouped 3x3
// conv of its channels (padding 1, any stride): a depthwise one (oneDNN fuses this pair: the pointwise result never
// leaves the cache) or one of several channels a group (RegNet's; oneDNN Graph takes the pair as one partition of
// two primitives). These are the pairs LibTorch's own fuser makes, whatever the activation after the 1x1 conv,
// given a whole model.
bool pointwise_feeds_grouped_3x3(const WeightSite& first, const WeightSite& second);

// Whether `site` is a depthwise conv: one input channel a group.
bool is_depthwise(const WeightSite& site);

// Every conv2d and linear site in `code` whose weight, bias and parameters are constants, with the operation fused into
// it when the next instructions allow. Sites a jump lands inside are left out (their arguments are not a
// straight run of pushes).
std::vector<WeightSite> find_weight_sites(const torch::jit::mobile::Code& code);

// Operators that mind a tensor's layout: views that fail on a channels_last tensor, and stride queries.
bool is_layout_sensitive(const std::string& op_name);

// How many values an operator pushes (its schema's returns), or nullopt if unknown.
using ReturnCount = std::function<std::optional<size_t>(const std::string& op_name)>;

// Where each site's result goes, from running the function's bytecode symbolically up to its first jump, call
// or other instruction whose effect on the stack it does not follow (beyond it, nothing is proven).
struct SiteDataflow {
  // Per site: its result is used, and only as the input (or, for a fused add, the tensor added) of other sites,
  // directly or through layout-following operations and layout-checked calls whose results only go there too.
  // Such a result may be channels_last: no other operator, and not the model's caller, ever sees it.
  std::vector<bool> feeds_only_sites;
  // Per site: every other use of its result is by an operator that takes a channels_last tensor for less than it
  // saves (permute, reshape: a detection head rearranging its maps; aten::append, a head collecting them), in a
  // function where nothing writes a tensor: what those results reach is not traced, and a reshape or flatten of
  // a channels_last tensor copies where the stock layout's views, so a write through it would be lost.
  std::vector<bool> escapes_only_to_layout_free_ops;
  // Per site: the site whose input its result is, when that is its only use; or -1.
  std::vector<int> sole_consumer;
  // Per call given as taking any layout (`any_layout_calls`) reached: the sites its input is computed from. Its
  // result is traced on like a layout-following operation's.
  std::map<size_t, std::vector<int>> any_layout_call_origins;
  // Per site: the sites its input is computed from, directly or through layout-following operations (below);
  // per site with a fused add, likewise for the tensor it adds. Empty: no site's result.
  std::vector<std::vector<int>> input_origins, residual_origins;
  // Per site whose fused add writes its residual in place: whether that residual is another site's result that
  // nothing else ever uses (the add its only use, no register keeps it), so that computing the sum into a new
  // tensor instead cannot be seen. False for every other site.
  std::vector<bool> residual_dies_at_add;
  // Per layout-checked call (`checked_layout_calls`) reached: the sites its input is computed from.
  std::map<size_t, std::vector<int>> checked_call_origins;
};

// Operators whose results hold the same values bit for bit whatever the layouts of their tensor arguments, and
// whose results are fresh tensors or their first argument (never a view): additions, subtractions and products
// of two tensors (each element one IEEE operation, so neither the iteration order nor vectorisation changes it;
// alpha must be left at 1), relu and hardtanh (each element a comparison's choice, NaN kept by the vectorised
// loop as by the scalar one: tests/test_layout_following.py checks NaN, -0.0 and infinities in both layouts).
// A site's result may go through them channels_last: their results are traced like the site's own.
bool is_layout_following(const std::string& op_name, int given_arguments);

// `writes_nothing`: no instruction of the function may write a tensor (a result may then escape channels_last).
// `any_layout_calls`: OP instructions whose kernels take their first argument in any layout, compute the same values
// bit for bit in any layout and return their result in the input's layout (pooling_layout.h's max_pool2d). `checked_layout_calls`: OP instructions whose kernels take their first
// argument in any layout and keep a channels_last one only where their result agrees with the stock layout's
// (pooling_layout.h's adaptive_avg_pool2d); their results are traced like a layout-following operation's.
SiteDataflow trace_site_results(const torch::jit::mobile::Code& code, const std::vector<WeightSite>& sites,
    const ReturnCount& returns_of, bool writes_nothing, const std::set<size_t>& any_layout_calls = {},
    const std::set<size_t>& checked_layout_calls = {});

} // namespace lightweight_dispatch
