// The bind-time stage: after every call site is bound to its generated kernel, give the conv2d sites whose
// weights and parameters are constants a kernel compiled for them, with the operation that follows fused in.
//
// A specialised site is prepared on its first call for each input shape (oneDNN Graph compiles for a shape),
// checked once against the generated kernel on that call, and from then on runs the compiled partition; a
// site oneDNN Graph does not take, or whose check fails, or that sees more shapes than it keeps, runs its
// generated kernels exactly as without the stage. Preparation is serialised per site, so concurrent runs are
// safe. Between specialised sites tensors stay channels_last, unless the model calls an operator whose result
// depends on strides (a view); Model restores the stock layout of what the model returns.
#pragma once

#include <lightweight_dispatch/runtime.h>
#include <lite_predictor/conv_sites.h>

#include <torch/csrc/jit/mobile/module.h>

#include <memory>
#include <string>
#include <vector>

namespace lightweight_dispatch {

class ConvSiteKernel;

using SpecializedSiteReport = SpecializedCallSite;

class Specialization {
 public:
  // Every re-bound site, with its counters now.
  std::vector<SpecializedSiteReport> sites() const;
  // What the call site at `instruction` of `function` runs, or null if the stage left it alone.
  const std::string* runs(const std::string& function, size_t instruction) const;
  bool channels_last_between_sites() const {
    return channels_last_;
  }

 private:
  friend std::shared_ptr<Specialization> specialize_call_sites(torch::jit::mobile::Module& module);
  struct Site {
    SpecializedSiteReport report;
    std::shared_ptr<ConvSiteKernel> kernel;
  };
  std::vector<Site> sites_;
  bool channels_last_ = false;
};

// Re-binds the module's specialisable call sites (bind_static must have run). The module must outlive
// nothing the result refers to: the re-bound operators hold their own state.
std::shared_ptr<Specialization> specialize_call_sites(torch::jit::mobile::Module& module);

// Whether a run on `inputs` needs restore_stock_layout: none of them is a channels_last 4-d tensor (from
// which the stock kernels, too, would return channels_last results).
bool inputs_are_stock_layout(const std::vector<c10::IValue>& inputs);
// Every 4-d tensor in `output` (through tuples, lists and dicts) that the stage left channels_last, made
// contiguous as the stock kernels would have returned it.
c10::IValue restore_stock_layout(c10::IValue output);

} // namespace lightweight_dispatch
