// The bind-time stage, as the runtime sees it: the one header of bind_time/ that runtime/ includes.
//
// After binding, the runtime offers the bound module to the stage (Stage::offer). The stage may re-bind call
// sites to kernels of its own (compiled partitions, folded values): those live in the module's operator tables,
// so the interpreter runs them like any other call site. Around each of a caller's runs the runtime hands the run
// to Stage::serve, which does what the stage's kernels need around a run (starting a background preparation run,
// cloning what shares memory with a folded value, giving returned tensors the stock layout, and the model check
// once the runs on some inputs have settled: model_check.h). Everything else —
// which rewrites exist, how they are proven, prepared and checked — stays inside bind_time/.
#pragma once

#include <bind_time/in_place_elementwise.h>
#include <bind_time/preparation_run.h>
#include <lightweight_dispatch/bind_time_report.h>
#include <runtime/op_binding.h>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/mobile/module.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lightweight_dispatch {

class BackgroundPreparer;
class ModelCheck;
class Specialization;

class Stage {
 public:
  // Runs `method` of the bound module on `inputs` through the runtime's interpreter, nothing more (the caller
  // has set inference mode).
  using MethodRun = std::function<c10::IValue(const std::string& method, std::vector<c10::IValue> inputs)>;

  // The stage's rewrites of `module`, whose every call site is bound already (bind_static); `schema_of` gives
  // each operator's schema, `kernel_of` the build's generated kernels by operator (read during the call only),
  // `run` runs a method as the runtime does (used for background preparation runs, which may outlive no caller:
  // the Stage must be destroyed before what `run` uses). `model_check`: whether the model check runs
  // (model_check.h). `choose_quantized_engines`: quantized convs and linears run on the engine fastest for them
  // (quantized_engines.h; results may move by a quantization step).
  static std::unique_ptr<Stage> offer(torch::jit::mobile::Module& module, const OperatorSchema& schema_of,
      const GeneratedKernelOf& kernel_of, Preparation preparation, bool model_check, bool choose_quantized_engines,
      MethodRun run);
  ~Stage();
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  // A caller's run of `method` on `inputs`, under inference mode: `run`, with what the stage's kernels need
  // around it. What it returns shares no memory with anything the stage keeps, and has the layout the stock
  // kernels would give it.
  c10::IValue serve(const std::string& method, std::vector<c10::IValue> inputs) const;

  // What the call site at `instruction` of `function` runs ("static+fused(conv2d,hardtanh_)", "static+folded"),
  // given the path binding chose for it; nullopt if the stage left it alone.
  std::optional<std::string> runs(const std::string& function, size_t instruction, const std::string& bound_path) const;
  std::vector<SpecializedCallSite> sites() const;
  std::vector<FoldedCallSite> folded_calls() const;
  std::vector<LayoutCallSite> layout_calls() const;
  std::vector<InPlaceCallSite> in_place_calls() const;
  std::vector<QuantizedEngineCallSite> quantized_engine_calls() const;
  // Returns once no background preparation run is running.
  void wait_for_kernels() const;
  BackgroundPreparationStatus background_preparation() const;
  ModelCheckReport model_check() const;
  const AttributeFreezingReport& attribute_freezing() const {
    return freezing_;
  }

 private:
  Stage() = default;
  // Runs `method` on a copy of a caller's inputs for the model check, with or without the compiled kernels.
  RunActivity comparison_run(const std::string& method, std::vector<c10::IValue> inputs, bool compiled_kernels) const;

  MethodRun run_;
  std::shared_ptr<Specialization> specialization_;
  std::unique_ptr<BackgroundPreparer> preparer_; // Preparation::Background, with sites to prepare
  std::string first_call_because_; // Background asked for, but a preparation run would show: why
  std::unique_ptr<ModelCheck> check_;
  mutable std::atomic<int> runs_in_flight_{0}; // the caller's runs through serve, now
  AttributeFreezingReport freezing_;
};

} // namespace lightweight_dispatch
