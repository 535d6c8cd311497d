// Each function mirrors one test_models/micro_*.py: the same loop count and, in each iteration, the kernels
// of its OPS_PER_ITERATION (C++ leaves the order within one expression open) with the arguments the
// bytecode passes, defaults included as the binder fills them. bench_per_op checks the outputs against the
// model's expected outputs, so a floor that drifts from its model is caught.
#include <benchmarks/kernel_floor.h>

#include <ATen/core/IListRef.h>
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/cat_cpu_dispatch.h>
#include <ATen/ops/clamp_cpu_dispatch.h>
#include <ATen/ops/div_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/exp_cpu_dispatch.h>
#include <ATen/ops/index_select_cpu_dispatch.h>
#include <ATen/ops/max_cpu_dispatch.h>
#include <ATen/ops/mul_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/select_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/sigmoid_cpu_dispatch.h>
#include <ATen/ops/slice_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/stack_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/sub_cpu_dispatch.h>
#include <ATen/ops/topk_cpu_dispatch.h>
#include <ATen/ops/view_cpu_dispatch.h>
#include <ATen/ops/zeros_compositeexplicitautograd_dispatch.h>

#include <array>
#include <map>
#include <stdexcept>

namespace lightweight_dispatch::bench {

namespace {

namespace cea = at::compositeexplicitautograd;

// micro_add_loop: 2000 x `x = x + y` (aten::add.Tensor, alpha=1 filled in by the binder).
std::vector<at::Tensor> add_loop(const std::vector<at::Tensor>& inputs) {
  at::Tensor x = inputs.at(0);
  const at::Tensor& y = inputs.at(1);
  const at::Scalar alpha(int64_t{1});
  for (int i = 0; i < 2000; ++i) {
    x = at::cpu::add(x, y, alpha);
  }
  return {x};
}

// micro_op_chain: 250 x sigmoid, mul.Tensor, cat, view, select.int, mul.Scalar, slice.Tensor, mul.Scalar, sub.Tensor.
std::vector<at::Tensor> op_chain(const std::vector<at::Tensor>& inputs) {
  at::Tensor x = inputs.at(0);
  const at::Tensor& w = inputs.at(1);
  const at::Scalar one(int64_t{1});
  for (int i = 0; i < 250; ++i) {
    const at::Tensor gated = at::cpu::mul(at::cpu::sigmoid(x), w);
    const std::array<at::Tensor, 2> parts{gated, x};
    const at::Tensor joined = at::cpu::cat(at::ITensorListRef(parts), 0);
    const at::Tensor rows = at::cpu::view(joined, {2, 4});
    const at::Tensor left = cea::mul(cea::select(rows, 0, 1), at::Scalar(0.5));
    const at::Tensor right = cea::mul(cea::slice(joined, 0, int64_t{2}, int64_t{6}, 1), at::Scalar(0.25));
    x = at::cpu::sub(left, right, one);
  }
  return {x};
}

// `t[:, i]`: slice.Tensor of dim 0 over the whole range, then select.int of dim 1.
at::Tensor column(const at::Tensor& t, int64_t i) {
  return cea::select(cea::slice(t, 0, std::nullopt, std::nullopt, 1), 1, i);
}

// micro_postprocess: 50 x box decoding, scoring and top-k, 53 kernel calls per iteration.
std::vector<at::Tensor> postprocess(const std::vector<at::Tensor>& inputs) {
  const at::Tensor& deltas = inputs.at(0);
  const at::Tensor& anchors = inputs.at(1);
  const at::Tensor& logits = inputs.at(2);
  const at::Scalar one(int64_t{1});
  at::Tensor top_boxes = cea::zeros({0}, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  at::Tensor top_scores = cea::zeros({0}, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  at::Tensor top_labels = cea::zeros({0}, at::kLong, std::nullopt, std::nullopt, std::nullopt);
  for (int i = 0; i < 50; ++i) {
    const at::Tensor widths = at::cpu::sub(column(anchors, 2), column(anchors, 0), one);
    const at::Tensor heights = at::cpu::sub(column(anchors, 3), column(anchors, 1), one);
    const at::Tensor centre_x = at::cpu::add(column(anchors, 0), cea::mul(widths, at::Scalar(0.5)), one);
    const at::Tensor centre_y = at::cpu::add(column(anchors, 1), cea::mul(heights, at::Scalar(0.5)), one);
    const at::Tensor dx = cea::div(column(deltas, 0), at::Scalar(10.0));
    const at::Tensor dy = cea::div(column(deltas, 1), at::Scalar(10.0));
    const at::Tensor dw = at::cpu::clamp(cea::div(column(deltas, 2), at::Scalar(5.0)), std::nullopt, at::Scalar(4.135));
    const at::Tensor dh = at::cpu::clamp(cea::div(column(deltas, 3), at::Scalar(5.0)), std::nullopt, at::Scalar(4.135));
    const at::Tensor pred_x = at::cpu::add(at::cpu::mul(dx, widths), centre_x, one);
    const at::Tensor pred_y = at::cpu::add(at::cpu::mul(dy, heights), centre_y, one);
    const at::Tensor pred_w = at::cpu::mul(at::cpu::exp(dw), widths);
    const at::Tensor pred_h = at::cpu::mul(at::cpu::exp(dh), heights);
    const at::Tensor half_w = cea::mul(pred_w, at::Scalar(0.5));
    const at::Tensor half_h = cea::mul(pred_h, at::Scalar(0.5));
    const std::array<at::Tensor, 4> corners{
        at::cpu::sub(pred_x, half_w, one),
        at::cpu::sub(pred_y, half_h, one),
        at::cpu::add(pred_x, half_w, one),
        at::cpu::add(pred_y, half_h, one)};
    const at::Tensor boxes = at::cpu::clamp(cea::stack(corners, 1), at::Scalar(0.0), at::Scalar(320.0));
    auto [best, labels] = at::cpu::max(at::cpu::sigmoid(logits), 1, false);
    auto [scores, order] = at::cpu::topk(best, 8, -1, true, true);
    top_scores = scores;
    top_boxes = at::cpu::index_select(boxes, 0, order);
    top_labels = at::cpu::index_select(labels, 0, order);
  }
  return {top_boxes, top_scores, top_labels};
}

const std::map<std::string, FloorFunction>& floors() {
  static const std::map<std::string, FloorFunction> table{
      {"micro_add_loop", add_loop},
      {"micro_op_chain", op_chain},
      {"micro_postprocess", postprocess},
  };
  return table;
}

} // namespace

const FloorFunction& kernel_floor(const std::string& model) {
  const auto it = floors().find(model);
  if (it == floors().end()) {
    std::string names;
    for (const auto& name : models_with_floor()) {
      names += (names.empty() ? "" : ", ") + name;
    }
    throw std::out_of_range("no kernel floor for model '" + model + "' (models with one: " + names + ")");
  }
  return it->second;
}

std::vector<std::string> models_with_floor() {
  std::vector<std::string> names;
  for (const auto& [name, function] : floors()) {
    names.push_back(name);
  }
  return names;
}

} // namespace lightweight_dispatch::bench
