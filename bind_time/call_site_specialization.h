// The bind-time stage: after every call site is bound to its generated kernel, give the conv2d and linear sites
// whose weights and parameters are constants a kernel compiled for them, with the operation that follows fused
// in; a 1x1 conv whose result only feeds a depthwise conv shares that conv's kernel.
//
// A specialised site is prepared for each input shape it meets (oneDNN Graph compiles for a shape): on that
// first call, or by a background run on a copy of that call's inputs (background_preparation.h), checked against
// the generated kernels on a probe input of the stage's own (seeded random values at that shape) and on those
// tensors, timed against the generated kernels (a site computing a problem another site raced already takes that
// race's verdict), and from then on runs the compiled partition where it was the faster; a site oneDNN Graph does
// not take, or whose check fails, or whose generated kernels were faster, or that sees more shapes than it keeps,
// runs its generated kernels exactly as without the stage. Preparation is serialised per site, so concurrent runs are
// safe. A result is channels_last, the layout oneDNN's kernels run fastest in, where that is free: when it only
// ever feeds other sites (traced through the bytecode), or also permutes in a model that calls no operator
// minding a tensor's layout (views, stride queries). Other results have the layout the generated kernels would
// give them. Model gives what the model returns the stock layout (restore_stock_layout).
#pragma once

#include <bind_time/folded_values.h>
#include <bind_time/in_place_elementwise.h>
#include <bind_time/pooling_layout.h>
#include <bind_time/quantized_engines.h>
#include <bind_time/weight_sites.h>
#include <lightweight_dispatch/bind_time_report.h>

#include <torch/csrc/jit/mobile/module.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace lightweight_dispatch {

class SiteKernel;

class Specialization {
 public:
  // What the stage re-bound: a site's kernel, a folded call's.
  struct Site {
    SpecializedCallSite report;
    std::shared_ptr<SiteKernel> kernel;
  };
  struct Folded {
    FoldedCallSite report;
    std::shared_ptr<FoldedCall> kernel;
  };
  struct Layout {
    LayoutCallSite report;
    std::shared_ptr<LayoutKernelCounts> kernel;
  };
  struct InPlace {
    InPlaceCallSite report;
    std::shared_ptr<InPlaceElementwiseKernel> kernel;
  };
  struct QuantizedEngine {
    QuantizedEngineCallSite report;
    std::shared_ptr<QuantizedEngineKernel> kernel;
  };

  // Every re-bound site, with its counters now.
  std::vector<SpecializedCallSite> sites() const;
  // What the call site at `instruction` of `function` runs, or null if the stage left it alone.
  const std::string* runs(const std::string& function, size_t instruction) const;
  // Every folded call (folded_values.h), with its counters now; whether the call at `instruction` is one.
  std::vector<FoldedCallSite> folded_calls() const;
  bool folds(const std::string& function, size_t instruction) const;
  // Every call site run in another layout (pooling_layout.h), with its counters now; whether `instruction` is one.
  std::vector<LayoutCallSite> layout_calls() const;
  bool changes_layout(const std::string& function, size_t instruction) const;
  // Every product or sum written in place (in_place_elementwise.h), with its counters now; whether `instruction` is one.
  std::vector<InPlaceCallSite> in_place_calls() const;
  bool writes_in_place(const std::string& function, size_t instruction) const;
  // Every quantized call choosing its engine (quantized_engines.h), with its counters now; whether `instruction` is one.
  std::vector<QuantizedEngineCallSite> quantized_engine_calls() const;
  bool chooses_engine(const std::string& function, size_t instruction) const;
  // `output` of a run on this thread with every tensor that shares memory with a result the folded calls handed
  // to the run cloned (its caller may write to it); `output` itself when nothing is folded.
  c10::IValue protect_folded(c10::IValue output) const;
  // Forgets what folded calls handed to this thread before (a run that failed): call before a run.
  void forget_handed_out() const;
  // Whether some call site prepares a kernel per input shape that a preparation run and the model check see to:
  // a compiled partition, or a quantized call's choice of engine.
  bool has_sites() const {
    return !sites_.empty() || chooses_engines();
  }
  // Whether no call site was re-bound: no site, folded call or layout kernel.
  bool rebinds_nothing() const {
    return sites_.empty() && folded_.empty() && layouts_.empty() && in_place_.empty() && !chooses_engines();
  }
  // Some channels_last result may reach what the model returns: Model restores the stock layout.
  bool may_return_channels_last() const {
    return returns_channels_last_;
  }

 private:
  friend std::shared_ptr<Specialization> specialize_call_sites(torch::jit::mobile::Module& module,
      const OperatorSchema& schema_of, const GeneratedKernelOf& kernel_of, bool prepare_on_first_call,
      bool choose_quantized_engines);
  std::vector<Site> sites_;
  std::vector<Folded> folded_;
  std::vector<Layout> layouts_;
  std::vector<InPlace> in_place_;
  std::vector<QuantizedEngine> quantized_; // with a null kernel where no other engine packs the weights
  bool chooses_engines() const {
    return std::any_of(quantized_.begin(), quantized_.end(), [](const QuantizedEngine& q) { return q.kernel != nullptr; });
  }
  bool returns_channels_last_ = false;
};

// Re-binds the module's specialisable call sites and folds what depends only on constants and input shapes
// (bind_static must have run); `schema_of` gives each operator's schema, for tracing where values go. With
// `prepare_on_first_call` a site's call meeting a new shape prepares it; without, only a preparation run does
// (background_preparation.h). `kernel_of` finds the generated kernels of the in-place overloads the stage calls.
// `choose_quantized_engines`: quantized convs and linears with constant weights choose their engine
// (quantized_engines.h). The re-bound operators hold their own state: the result only reports on them.
std::shared_ptr<Specialization> specialize_call_sites(torch::jit::mobile::Module& module,
    const OperatorSchema& schema_of, const GeneratedKernelOf& kernel_of, bool prepare_on_first_call,
    bool choose_quantized_engines);

// Whether a run on `inputs` needs restore_stock_layout: none of them is a channels_last 4-d tensor (from
// which the stock kernels, too, would return channels_last results).
bool inputs_are_stock_layout(const std::vector<c10::IValue>& inputs);
// Every 4-d tensor in `output` (through tuples, lists and dicts) that the stage left channels_last, made
// contiguous as the stock kernels would have returned it.
c10::IValue restore_stock_layout(c10::IValue output);

} // namespace lightweight_dispatch
