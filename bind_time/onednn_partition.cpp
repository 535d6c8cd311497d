#include <bind_time/onednn_partition.h>

#include <ATen/Config.h>
#include <ATen/ops/empty.h>

// Where the stage compiles kernels: x86-64 LibTorch with oneDNN, the only place they were measured against the
// generated kernels and the peers. The aarch64 wheels have oneDNN (with Arm Compute Library) and oneDNN Graph
// too, and it compiles and runs there under emulation, but nothing here says it is faster on ARM hardware, so
// an ARM build keeps every site's generated kernels (its folded values still apply).
#if AT_MKLDNN_ENABLED() && defined(__x86_64__)
#define LIGHTWEIGHT_DISPATCH_ONEDNN_GRAPH 1
#else
#define LIGHTWEIGHT_DISPATCH_ONEDNN_GRAPH 0
#endif

#if LIGHTWEIGHT_DISPATCH_ONEDNN_GRAPH
#include <torch/csrc/jit/codegen/onednn/interface.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>
#endif

#include <exception>
#include <mutex>

namespace lightweight_dispatch {

#if LIGHTWEIGHT_DISPATCH_ONEDNN_GRAPH // the checks are oneDNN Graph's; without it no site is compiled

namespace {

bool is_dense_float_cpu(const at::Tensor& t, int64_t dim) {
  return t.defined() && t.dim() == dim && t.scalar_type() == at::kFloat && t.layout() == at::kStrided &&
         t.device().is_cpu() && !t.is_mkldnn() && t.is_non_overlapping_and_dense();
}

std::vector<int64_t> chain_output_sizes(const SiteChain& chain, const at::Tensor& input) {
  std::vector<int64_t> sizes = input.sizes().vec();
  for (const WeightSite* site : chain) {
    sizes = site_output_sizes(*site, sizes);
  }
  return sizes;
}

// Why oneDNN Graph cannot take this site for an input of `sizes`, or "" if it can try.
std::string unsupported_because(const WeightSite& site, const std::vector<int64_t>& sizes) {
  const int64_t weight_dim = site.op == SiteOp::Conv2d ? 4 : 2;
  if (!is_dense_float_cpu(site.weight, weight_dim) || (site.bias && !is_dense_float_cpu(*site.bias, 1))) {
    return "the weight or bias is not float32";
  }
  if (site.op == SiteOp::Linear) {
    return sizes.back() == site.weight.size(1) ? "" : "the weight does not fit the input's last dimension";
  }
  if (sizes.size() != 4 || site.stride.size() != 2 || site.padding.size() != 2 || site.dilation.size() != 2 ||
      site.groups < 1 || sizes[1] != site.weight.size(1) * site.groups) {
    return "the parameters do not describe a 2-d convolution of this input";
  }
  const auto out = site_output_sizes(site, sizes);
  return out[2] < 1 || out[3] < 1 ? "the input is smaller than the kernel" : "";
}

// Why oneDNN Graph cannot take this chain for these tensors, or "" if it can try.
std::string unsupported_because(const SiteChain& chain, const at::Tensor& input, const at::Tensor* residual) {
  const int64_t dim = chain.front()->op == SiteOp::Conv2d ? 4 : 2; // oneDNN Graph's matmul here: 2-d
  if (!is_dense_float_cpu(input, dim)) {
    return "the input is not a dense " + std::to_string(dim) + "-d float32 CPU tensor";
  }
  std::vector<int64_t> sizes = input.sizes().vec();
  for (const WeightSite* site : chain) {
    if (std::string why = unsupported_because(*site, sizes); !why.empty()) {
      return why;
    }
    sizes = site_output_sizes(*site, sizes);
  }
  if (chain.back()->adds() &&
      (residual == nullptr || !is_dense_float_cpu(*residual, dim) || residual->sizes() != sizes)) {
    return "the tensor added is not a dense float32 tensor of the result's sizes";
  }
  return "";
}

} // namespace

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

struct OnednnPartition::Impl {
  // compile_each's: one kernel per site, run in turn (the rest of Impl then unused).
  std::vector<std::unique_ptr<OnednnPartition>> steps;
  std::shared_ptr<Graph> graph; // owns the fusion group node the operation refers to
  std::optional<torch::jit::Operation> operation;
  std::vector<int> input_order; // per fusion-group input: 0 = the chain's input, 1 = the tensor added
  std::vector<int64_t> result_sizes; // a linear chain run on rows (runs_on_rows): the result's sizes; else empty
};

namespace {

// A site's fused operation appended to `graph`, on `value` (and, for the residual add, `residual` beneath it), as
// the nodes LibTorch's fuser maps to oneDNN Graph ops; its result, typed `type`. SiLU is the product of the value
// and its sigmoid, as that fuser decomposes it (oneDNN Graph fuses the pair into the convolution as swish).
Value* append_post_op(Graph& graph, const FusedPostOp& post_op, Value* value, Value* residual,
    const c10::TensorTypePtr& type) {
  namespace aten = torch::jit::aten;
  Value* result = nullptr;
  switch (post_op.op) {
    case PostOp::Relu:
      result = graph.insert(aten::relu, {value});
      break;
    case PostOp::Hardtanh:
      result = graph.insert(aten::hardtanh, {value, post_op.clamp_min, post_op.clamp_max});
      break;
    case PostOp::Silu: {
      Value* sigmoid = graph.insert(aten::sigmoid, {value});
      sigmoid->setType(type);
      result = graph.insert(aten::mul, {value, sigmoid});
      break;
    }
    case PostOp::Sigmoid:
      result = graph.insert(aten::sigmoid, {value});
      break;
    case PostOp::Hardswish:
      result = graph.insert(aten::hardswish, {value});
      break;
    case PostOp::Tanh:
      result = graph.insert(aten::tanh, {value});
      break;
    case PostOp::Gelu:
      result = graph.insert(aten::gelu, {value});
      break;
    case PostOp::Add:
      result = graph.insert(aten::add, {residual, value});
      break;
  }
  result->setType(type);
  return result;
}

// One site's operator and fused operations appended to `graph`, after `input`; its result.
Value* append_site(Graph& graph, const WeightSite& site, Value* input, Value* residual, const c10::TensorTypePtr& type) {
  namespace aten = torch::jit::aten;
  // A model saved unfrozen keeps its weights as parameters that require grad, which the graph takes as constants
  // only detached (the same data: nothing here computes gradients).
  Value* weight = graph.insertConstant(site.weight.detach());
  Value* bias = site.bias ? graph.insertConstant(site.bias->detach()) : graph.insertConstant(c10::IValue());
  Value* result = site.op == SiteOp::Linear
                      ? graph.insert(aten::linear, {input, weight, bias})
                      : graph.insert(aten::conv2d,
                            {input, weight, bias, site.stride, site.padding, site.dilation, site.groups});
  result->setType(type);
  for (const FusedPostOp& post_op : site.post_ops) {
    result = append_post_op(graph, post_op, result, residual, type);
  }
  return result;
}

// The chain as a TorchScript graph whose values carry the sizes and strides oneDNN Graph compiles for (a value
// between two sites is channels_last: no one sees it).
std::shared_ptr<Graph> chain_graph(const SiteChain& chain, const at::Tensor& input, const at::Tensor* residual,
    const at::Tensor& output_like, Value*& input_value, Value*& residual_value) {
  auto graph = std::make_shared<Graph>();
  input_value = graph->addInput("input");
  input_value->setType(c10::TensorType::create(input));
  residual_value = nullptr;
  if (chain.back()->adds()) {
    residual_value = graph->addInput("residual");
    residual_value->setType(c10::TensorType::create(*residual));
  }
  torch::jit::WithInsertPoint insert_at(graph->block());
  Value* value = input_value;
  std::vector<int64_t> sizes = input.sizes().vec();
  for (size_t i = 0; i < chain.size(); ++i) {
    sizes = site_output_sizes(*chain[i], sizes);
    const bool last = i + 1 == chain.size();
    const at::Tensor like = last ? output_like
                                 : at::empty(sizes, input.options().memory_format(c10::MemoryFormat::ChannelsLast));
    value = append_site(*graph, *chain[i], value, last ? residual_value : nullptr, c10::TensorType::create(like));
  }
  graph->registerOutput(value);
  return graph;
}

// oneDNN Graph keeps a constant input (the weight) in the layout its kernel wants, reordered once, only with its
// constant tensor cache on; LibTorch exports no switch for it but turns it on in its fuser's entry point. Running
// that pass once on an identity graph does nothing else (measured: MobileNetV2 7.5 -> 6.3 ms with it).
void enable_constant_weight_cache() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto identity = std::make_shared<Graph>();
    identity->registerOutput(identity->addInput("x")->setType(c10::TensorType::get()));
    torch::jit::fuser::onednn::fuseGraph(identity);
  });
}

} // namespace

bool onednn_graph_available() {
  return true;
}

namespace {

// A linear chain's input of more than 2 dimensions (a batch of sequences), contiguous, and its residual: oneDNN
// Graph's matmul is compiled for the 2-d view [rows, features] of them, which computes the same rows.
bool runs_on_rows(const SiteChain& chain, const at::Tensor& input, const at::Tensor* residual) {
  return chain.front()->op == SiteOp::Linear && input.dim() > 2 && input.is_contiguous() &&
         (residual == nullptr || residual->is_contiguous());
}

at::Tensor rows_of(const at::Tensor& t) {
  return t.view({-1, t.size(-1)});
}

} // namespace

std::unique_ptr<OnednnPartition> OnednnPartition::compile(const SiteChain& chain, const at::Tensor& input,
    const at::Tensor* residual, c10::MemoryFormat output_format, at::Tensor& first_result, std::string& why_not) {
  if (!runs_on_rows(chain, input, residual)) {
    return compile_as_given(chain, input, residual, output_format, first_result, why_not);
  }
  const at::Tensor input_rows = rows_of(input);
  const std::optional<at::Tensor> residual_rows =
      residual != nullptr ? std::optional<at::Tensor>(rows_of(*residual)) : std::nullopt;
  auto partition = compile_as_given(chain, input_rows, residual_rows ? &*residual_rows : nullptr,
      c10::MemoryFormat::Contiguous, first_result, why_not);
  if (partition) {
    std::vector<int64_t> sizes = input.sizes().vec();
    sizes.back() = first_result.size(-1);
    partition->impl_->result_sizes = sizes;
    first_result = first_result.view(sizes);
  }
  return partition;
}

std::unique_ptr<OnednnPartition> OnednnPartition::compile_as_given(const SiteChain& chain, const at::Tensor& input,
    const at::Tensor* residual, c10::MemoryFormat output_format, at::Tensor& first_result, std::string& why_not) {
  why_not = unsupported_because(chain, input, residual);
  if (!why_not.empty()) {
    return nullptr;
  }
  enable_constant_weight_cache();
  const at::Tensor output_like = at::empty(chain_output_sizes(chain, input), input.options().memory_format(output_format));
  auto impl = std::make_unique<Impl>();
  try {
    // The fusion group LibTorch's TorchScript fuser would form for this chain, made directly: the chain's graph
    // as its subgraph, its result in a plain strided layout. (fuseGraph would get there through a dozen
    // TorchScript passes: ~2 ms a site, most of a site's preparation.) LlgaKernel refuses a subgraph oneDNN
    // Graph splits into more than one partition.
    Value* input_value = nullptr;
    Value* residual_value = nullptr;
    std::shared_ptr<Graph> subgraph = chain_graph(chain, input, residual, output_like, input_value, residual_value);
    impl->graph = std::make_shared<Graph>();
    std::vector<Value*> group_inputs;
    for (Value* value : subgraph->inputs()) {
      group_inputs.push_back(impl->graph->addInput()->setType(value->type()));
      impl->input_order.push_back(value == input_value ? 0 : 1);
    }
    Node* group = impl->graph->create(torch::jit::prim::oneDNNFusionGroup, group_inputs, 1);
    group->g_(torch::jit::attr::Subgraph, subgraph);
    group->is_(torch::jit::attr::output_layouts, {0}); // strided, not oneDNN's opaque layout
    group->output()->setType(subgraph->outputs()[0]->type());
    impl->graph->insertNode(group);
    impl->graph->registerOutput(group->output());
    impl->operation = group->getOperation();
    std::unique_ptr<OnednnPartition> partition(new OnednnPartition(std::move(impl)));
    // oneDNN compiles on the first execution: do it now, so that a failure is this site's and not a run's.
    first_result = partition->run(input, residual);
    if (first_result.sizes() != output_like.sizes() || first_result.strides() != output_like.strides() ||
        first_result.is_mkldnn()) {
      why_not = "oneDNN Graph's result does not have the layout asked for";
      return nullptr;
    }
    return partition;
  } catch (const std::exception& e) {
    why_not = std::string("oneDNN Graph failed: ") + e.what();
    why_not = why_not.substr(0, why_not.find('\n'));
    return nullptr;
  }
}

std::unique_ptr<OnednnPartition> OnednnPartition::compile_each(const SiteChain& chain, const at::Tensor& input,
    const at::Tensor* residual, c10::MemoryFormat output_format, at::Tensor& first_result, std::string& why_not) {
  auto impl = std::make_unique<Impl>();
  at::Tensor step_input = input;
  for (size_t i = 0; i < chain.size(); ++i) {
    const bool last = i + 1 == chain.size();
    at::Tensor step_result;
    auto step = compile(SiteChain{chain[i]}, step_input, last ? residual : nullptr,
        last ? output_format : c10::MemoryFormat::ChannelsLast, step_result, why_not);
    if (!step) {
      return nullptr;
    }
    impl->steps.push_back(std::move(step));
    step_input = std::move(step_result);
  }
  first_result = std::move(step_input);
  return std::unique_ptr<OnednnPartition>(new OnednnPartition(std::move(impl)));
}

at::Tensor OnednnPartition::run(const at::Tensor& input, const at::Tensor* residual) const {
  if (!impl_->steps.empty()) {
    at::Tensor value = impl_->steps.front()->run(input, impl_->steps.size() == 1 ? residual : nullptr);
    for (size_t i = 1; i < impl_->steps.size(); ++i) {
      value = impl_->steps[i]->run(value, i + 1 == impl_->steps.size() ? residual : nullptr);
    }
    return value;
  }
  torch::jit::Stack stack;
  stack.reserve(impl_->input_order.size());
  const bool rows = !impl_->result_sizes.empty();
  for (int which : impl_->input_order) {
    const at::Tensor& given = which == 0 ? input : *residual;
    stack.emplace_back(rows ? rows_of(given) : given);
  }
  (*impl_->operation)(stack);
  return rows ? stack.back().toTensor().view(impl_->result_sizes) : stack.back().toTensor();
}

#else // no oneDNN Graph here: every site keeps its generated kernel

struct OnednnPartition::Impl {};

bool onednn_graph_available() {
  return false;
}

std::unique_ptr<OnednnPartition> OnednnPartition::compile(const SiteChain&, const at::Tensor&,
    const at::Tensor*, c10::MemoryFormat, at::Tensor&, std::string& why_not) {
  why_not = "this build compiles no oneDNN Graph kernels (x86-64 only)";
  return nullptr;
}

std::unique_ptr<OnednnPartition> OnednnPartition::compile_each(const SiteChain&, const at::Tensor&,
    const at::Tensor*, c10::MemoryFormat, at::Tensor&, std::string& why_not) {
  why_not = "this build compiles no oneDNN Graph kernels (x86-64 only)";
  return nullptr;
}

at::Tensor OnednnPartition::run(const at::Tensor&, const at::Tensor*) const {
  TORCH_CHECK(false, "this build compiles no oneDNN Graph kernels (x86-64 only)");
}

#endif

OnednnPartition::OnednnPartition(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

size_t OnednnPartition::kernel_count() const {
#if LIGHTWEIGHT_DISPATCH_ONEDNN_GRAPH
  return impl_->steps.empty() ? 1 : impl_->steps.size();
#else
  return 0;
#endif
}
OnednnPartition::~OnednnPartition() = default;

} // namespace lightweight_dispatch
