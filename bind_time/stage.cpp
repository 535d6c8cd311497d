#include <bind_time/stage.h>

#include <bind_time/attribute_freezing.h>
#include <bind_time/background_preparation.h>
#include <bind_time/call_site_specialization.h>
#include <bind_time/model_check.h>
#include <bind_time/preparation_run.h>
#include <runtime/tensor_tree.h>

#include <c10/core/InferenceMode.h>

namespace lightweight_dispatch {

std::unique_ptr<Stage> Stage::offer(torch::jit::mobile::Module& module, const OperatorSchema& schema_of,
    const GeneratedKernelOf& kernel_of, Preparation preparation, bool model_check, bool choose_quantized_engines,
    MethodRun run) {
  std::unique_ptr<Stage> stage(new Stage());
  stage->run_ = std::move(run);
  stage->freezing_ = freeze_attributes(module, schema_of); // first: the other rewrites then see constants
  const std::string second_run_would_show = why_a_preparation_run_would_show(module, schema_of);
  bool background = preparation == Preparation::Background;
  if (background) {
    stage->first_call_because_ = second_run_would_show;
    background = stage->first_call_because_.empty();
  }
  stage->specialization_ = specialize_call_sites(module, schema_of, kernel_of, !background, choose_quantized_engines);
  if (!stage->specialization_->has_sites()) {
    stage->first_call_because_.clear(); // nothing to prepare either way
  }
  stage->check_ = std::make_unique<ModelCheck>(
      !model_check                         ? "turned off (LoadOptions::model_check; lite_predictor --no-model-check)"
      : !stage->specialization_->has_sites() ? "no call site can run a compiled kernel"
      : !second_run_would_show.empty()       ? "a run it makes unseen could be seen: " + second_run_would_show
                                             : "");
  if (background && stage->specialization_->has_sites()) {
    stage->preparer_ = std::make_unique<BackgroundPreparer>(
        [run = stage->run_](const std::string& method, std::vector<c10::IValue> inputs) {
          c10::InferenceMode inference_mode;
          set_run_inputs_stock_layout(inputs_are_stock_layout(inputs)); // the layouts the caller's run had
          run(method, std::move(inputs));
        });
  }
  return stage;
}

Stage::~Stage() {
  preparer_.reset(); // its run uses the module and the re-bound kernels
}

c10::IValue Stage::serve(const std::string& method, std::vector<c10::IValue> inputs) const {
  if (!freezing_.applied && specialization_->rebinds_nothing()) {
    return run_(method, std::move(inputs)); // the model as bound: nothing to do around the run
  }
  const bool stock_inputs = inputs_are_stock_layout(inputs);
  set_run_inputs_stock_layout(stock_inputs);
  set_preparation_run_follows(preparer_ != nullptr);
  const bool restore = specialization_->may_return_channels_last() && stock_inputs;
  const std::string kind = check_->runs() ? inputs_kind(method, inputs) : std::string();
  const ModelCheck::Plan plan = check_->plan(kind);
  // As given, for the model check: the run may change its inputs in place.
  const std::vector<c10::IValue> kept = plan.keep_inputs ? deep_copies(inputs) : std::vector<c10::IValue>{};
  set_compiled_kernels_allowed(plan.compiled_kernels);
  take_run_activity(); // only this run's
  struct InFlight {
    std::atomic<int>& count;
    explicit InFlight(std::atomic<int>& c) : count(c) {
      count.fetch_add(1, std::memory_order_acq_rel);
    }
    ~InFlight() {
      count.fetch_sub(1, std::memory_order_acq_rel);
    }
  } in_flight(runs_in_flight_);
  c10::IValue output;
  specialization_->forget_handed_out();
  if (!preparer_) {
    output = run_(method, std::move(inputs));
  } else {
    take_unprepared_shape(); // only this run's
    const std::vector<c10::IValue> given = inputs; // the values, shared: copied only if a run starts
    output = run_(method, std::move(inputs));
    if (take_unprepared_shape()) {
      preparer_->start(method, given);
    }
  }
  const RunActivity activity = take_run_activity();
  output = specialization_->protect_folded(std::move(output));
  output = restore ? restore_stock_layout(std::move(output)) : output;
  if (plan.keep_inputs) {
    const bool alone = runs_in_flight_.load(std::memory_order_acquire) == 1 && preparation_runs_in_flight() == 0;
    check_->after_callers_run(kind, method, kept, activity, alone,
        [this](const std::string& m, std::vector<c10::IValue> in, bool compiled) {
          return comparison_run(m, std::move(in), compiled);
        });
  }
  return output;
}

RunActivity Stage::comparison_run(
    const std::string& method, std::vector<c10::IValue> inputs, bool compiled_kernels) const {
  const ComparisonRunScope scope(compiled_kernels);
  specialization_->forget_handed_out();
  take_run_activity();
  take_unprepared_shape();
  run_(method, std::move(inputs)); // its output is dropped: what it shares with folded values, too
  specialization_->forget_handed_out();
  take_unprepared_shape(); // a comparison run starts no preparation run
  return take_run_activity();
}

ModelCheckReport Stage::model_check() const {
  return check_ ? check_->report() : ModelCheckReport{};
}

std::optional<std::string> Stage::runs(
    const std::string& function, size_t instruction, const std::string& bound_path) const {
  if (const std::string* specialized = specialization_->runs(function, instruction)) {
    return *specialized;
  }
  if (specialization_->folds(function, instruction)) {
    return bound_path + "+folded";
  }
  if (specialization_->changes_layout(function, instruction)) {
    return bound_path + "+channels_last";
  }
  if (specialization_->writes_in_place(function, instruction)) {
    return bound_path + "+in_place";
  }
  if (specialization_->chooses_engine(function, instruction)) {
    return bound_path + "+engine_choice";
  }
  return std::nullopt;
}

std::vector<SpecializedCallSite> Stage::sites() const {
  return specialization_->sites();
}

std::vector<LayoutCallSite> Stage::layout_calls() const {
  return specialization_->layout_calls();
}

std::vector<InPlaceCallSite> Stage::in_place_calls() const {
  return specialization_->in_place_calls();
}

std::vector<QuantizedEngineCallSite> Stage::quantized_engine_calls() const {
  return specialization_->quantized_engine_calls();
}

std::vector<FoldedCallSite> Stage::folded_calls() const {
  return specialization_->folded_calls();
}

void Stage::wait_for_kernels() const {
  if (preparer_) {
    preparer_->wait();
  }
}

BackgroundPreparationStatus Stage::background_preparation() const {
  BackgroundPreparationStatus status = preparer_ ? preparer_->status() : BackgroundPreparationStatus{};
  status.first_call_because = first_call_because_;
  return status;
}

} // namespace lightweight_dispatch
