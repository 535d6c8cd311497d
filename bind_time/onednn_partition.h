// A conv2d call site (and the operation fused into it), or a chain of them each feeding the next, compiled by
// oneDNN Graph, the graph compiler inside LibTorch, as one kernel for one input shape and layout.
//
// The partition is what LibTorch's own TorchScript fuser for oneDNN Graph (torch/csrc/jit/codegen/onednn) would
// make of the site: a small TorchScript graph of it (the input as its parameter, typed with the input's sizes and
// strides; weight, bias and parameters as constants; the fused operation after the conv) as the subgraph of a
// prim::oneDNNFusionGroup node, run through that node's JIT operator (LibTorch's LlgaKernel). oneDNN compiles it
// on its first execution, reorders the constant weight once and caches it; every call runs the compiled kernel.
// Nothing here is LibTorch-internal state a .ptl could carry: it is made at run time, in this process.
#pragma once

#include <bind_time/weight_sites.h>

#include <ATen/core/Tensor.h>
#include <c10/core/MemoryFormat.h>

#include <memory>
#include <optional>
#include <string>

namespace lightweight_dispatch {

// Whether the stage compiles oneDNN Graph kernels here: x86-64 builds of a LibTorch with MKLDNN.
bool onednn_graph_available();

class OnednnPartition {
 public:
  // Compiles `chain` for `input` (and, when its last site has a residual add fused, `residual`), producing its
  // result in `output_format`, and runs it once on them (oneDNN compiles on the first execution): that result
  // goes to `first_result`. Returns null with `why_not` set when oneDNN Graph does not take the chain (an
  // unsupported dtype or parameters, more than one partition, a failed compilation, a result in another layout).
  static std::unique_ptr<OnednnPartition> compile(const SiteChain& chain, const at::Tensor& input,
      const at::Tensor* residual, c10::MemoryFormat output_format, at::Tensor& first_result, std::string& why_not);

  // The same contract as `compile`, but each site of `chain` compiled as a kernel of its own, run one after the
  // other at the chain's call, each intermediate result channels_last (as between two sites' own kernels): what a
  // pair of sites runs where one kernel for both is slower at this shape.
  static std::unique_ptr<OnednnPartition> compile_each(const SiteChain& chain, const at::Tensor& input,
      const at::Tensor* residual, c10::MemoryFormat output_format, at::Tensor& first_result, std::string& why_not);

  ~OnednnPartition();
  // A linear chain's input of more than 2 dimensions, contiguous, runs as its 2-d view of rows.

  // How many oneDNN Graph kernels a run runs: 1, or compile_each's one per site.
  size_t kernel_count() const;

  // Runs on tensors of exactly the sizes and strides it was compiled for (the caller checks).
  at::Tensor run(const at::Tensor& input, const at::Tensor* residual) const;

 private:
  struct Impl;
  explicit OnednnPartition(std::unique_ptr<Impl> impl);
  static std::unique_ptr<OnednnPartition> compile_as_given(const SiteChain& chain, const at::Tensor& input,
      const at::Tensor* residual, c10::MemoryFormat output_format, at::Tensor& first_result, std::string& why_not);
  std::unique_ptr<Impl> impl_;
};

} // namespace lightweight_dispatch
