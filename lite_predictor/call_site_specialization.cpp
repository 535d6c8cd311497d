#include <lite_predictor/call_site_specialization.h>

#include <lite_predictor/onednn_partition.h>
#include <lite_predictor/op_binding.h>

#include <ATen/ops/aminmax.h>
#include <ATen/ops/max.h>
#include <ATen/core/stack.h>
#include <torch/csrc/jit/mobile/code.h>
#include <torch/csrc/jit/mobile/function.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <mutex>
#include <sstream>

namespace lightweight_dispatch {

using StackOperation = std::function<void(torch::jit::Stack&)>; // an operator table entry

namespace {

// Shapes a site keeps a compiled partition for; a site called with more runs its generated kernels for them.
constexpr size_t kMaxShapesPerSite = 4;

// The check made once per shape: the partition against the generated kernels, on the first call's tensors.
constexpr double kCheckRtol = 1e-5;
constexpr double kCheckAtol = 1e-5;

// A cheap call (fewer multiply-adds than this: ~0.3 ms of convolution here) is timed both ways before the compiled
// kernel is kept: its fixed cost per call (~5 us) can outweigh what it saves.
constexpr double kRaceBelowMacs = 8e6;
constexpr int kRaceRounds = 3;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string short_name(const std::string& op) {
  const auto colons = op.find("::");
  return colons == std::string::npos ? op : op.substr(colons + 2);
}

// max |got - expected| <= atol + rtol * max |expected|, computed in `expected`'s own memory (it is discarded):
// four passes and no new buffer, where at::allclose makes six passes and four result-sized temporaries, whose
// fresh pages cost most of the check on a first run.
bool agrees(const at::Tensor& got, at::Tensor& expected) {
  const auto [low, high] = at::aminmax(expected);
  const double scale = std::max(std::abs(low.item<double>()), std::abs(high.item<double>()));
  const double worst = expected.sub_(got).abs_().max().item<double>();
  return std::isfinite(worst) && worst <= kCheckAtol + kCheckRtol * scale;
}

struct TensorShape {
  std::vector<int64_t> sizes, strides;
  bool matches(const at::Tensor& t) const {
    return t.sizes() == c10::IntArrayRef(sizes) && t.strides() == c10::IntArrayRef(strides) &&
           t.scalar_type() == at::kFloat && !t.is_mkldnn();
  }
  static TensorShape of(const at::Tensor& t) {
    return {t.sizes().vec(), t.strides().vec()};
  }
};

} // namespace

// The layout a site gives its result.
enum class ResultLayout {
  ChannelsLast, // it only feeds other sites (or permutes, in a model with no operator that minds layouts)
  Contiguous,   // it reaches other operators, and its input came channels_last from a site: the stock kernels
                // would have had (and returned) a contiguous tensor
  AsInput,      // it reaches other operators: as the kernels would lay it out from this input
};

namespace {

const char* result_layout_name(ResultLayout layout) {
  switch (layout) {
    case ResultLayout::ChannelsLast:
      return "channels_last";
    case ResultLayout::Contiguous:
      return "contiguous";
    case ResultLayout::AsInput:
      return "as its input";
  }
  return "?";
}

} // namespace

// The operator a specialised conv2d site is re-bound to. Its stack holds what the generated conv2d kernel
// would pop (the input and the constants after it) and, for a fused add, the tensor added beneath them.
class ConvSiteKernel {
 public:
  ConvSiteKernel(ConvSite site, size_t conv_arguments, StackOperation conv, StackOperation post_op,
      ResultLayout layout)
      : site_(std::move(site)), conv_arguments_(conv_arguments), conv_(std::move(conv)), post_op_(std::move(post_op)),
        layout_(layout) {}

  void operator()(torch::jit::Stack& stack) const {
    const c10::IValue& input_value = stack[stack.size() - conv_arguments_];
    const bool adds = site_.post_op == PostOp::Add;
    const c10::IValue* residual_value = adds ? &stack[stack.size() - conv_arguments_ - 1] : nullptr;
    if (!input_value.isTensor() || (adds && !residual_value->isTensor())) {
      run_generated(stack);
      return;
    }
    const at::Tensor& input = input_value.toTensor();
    const at::Tensor* residual = adds ? &residual_value->toTensor() : nullptr;
    if (const Prepared* prepared = find_prepared(input, residual)) {
      run_prepared(*prepared, input, residual, stack);
    } else {
      prepare_and_run(input, residual, stack);
    }
  }

  int64_t specialized_calls() const {
    return specialized_calls_.load();
  }
  int64_t generated_calls() const {
    return generated_calls_.load();
  }
  std::vector<std::string> notes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return notes_;
  }
  double prepare_ms() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return prepare_ms_;
  }

 private:
  struct Prepared {
    TensorShape input;
    std::optional<TensorShape> residual;
    std::unique_ptr<OnednnConvPartition> partition; // null: this shape runs the generated kernels
    bool matches(const at::Tensor& in, const at::Tensor* res) const {
      return input.matches(in) && (res == nullptr || (residual && residual->matches(*res)));
    }
  };

  // A shape prepared already: its compiled partition, or the generated kernels.
  void run_prepared(const Prepared& prepared, const at::Tensor& input, const at::Tensor* residual,
      torch::jit::Stack& stack) const {
    if (!prepared.partition) {
      run_generated(stack);
      return;
    }
    at::Tensor result = prepared.partition->run(input, residual);
    torch::jit::drop(stack, conv_arguments_ + (residual != nullptr ? 1 : 0));
    torch::jit::push(stack, std::move(result));
    specialized_calls_.fetch_add(1, std::memory_order_relaxed);
  }

  // The generated kernels, as the site would run without the stage.
  void run_generated(torch::jit::Stack& stack) const {
    generated_calls_.fetch_add(1, std::memory_order_relaxed);
    run_generated_kernels(stack);
  }

  void run_generated_kernels(torch::jit::Stack& stack) const {
    conv_(stack);
    if (site_.post_op != PostOp::None) {
      for (const c10::IValue& argument : site_.post_op_arguments) {
        stack.push_back(argument);
      }
      post_op_(stack);
    }
    if (layout_ == ResultLayout::Contiguous && !stack.back().toTensor().is_contiguous()) {
      stack.back() = stack.back().toTensor().contiguous(); // given a site's channels_last result
    }
  }

  // What these tensors' shape was prepared with (a null partition: the generated kernels), or null if it was
  // not prepared yet.
  const Prepared* find_prepared(const at::Tensor& input, const at::Tensor* residual) const {
    const Prepared* last = last_.load(std::memory_order_acquire);
    if (last != nullptr && last->matches(input, residual)) {
      return last;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    return find_prepared_locked(input, residual);
  }

  const Prepared* find_prepared_locked(const at::Tensor& input, const at::Tensor* residual) const {
    for (const auto& prepared : prepared_) {
      if (prepared->matches(input, residual)) {
        last_.store(prepared.get(), std::memory_order_release);
        return prepared.get();
      }
    }
    static const Prepared generated_only{};
    return prepared_.size() >= kMaxShapesPerSite ? &generated_only : nullptr;
  }

  // The first call of a shape: compiles a partition for it, checks it against the generated kernels on these
  // very tensors, keeps it if it agrees, and leaves the call's result on the stack.
  void prepare_and_run(const at::Tensor& input, const at::Tensor* residual, torch::jit::Stack& stack) const {
    std::unique_lock<std::mutex> lock(mutex_);
    if (const Prepared* prepared = find_prepared_locked(input, residual)) { // another thread was first
      lock.unlock();
      run_prepared(*prepared, input, residual, stack);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    auto prepared = std::make_unique<Prepared>();
    prepared->input = TensorShape::of(input);
    if (residual != nullptr) {
      prepared->residual = TensorShape::of(*residual);
    }
    // The generated kernels pop these from the stack: keep them for the check.
    const at::Tensor input_kept = input;
    const at::Tensor residual_kept = residual != nullptr ? *residual : at::Tensor();
    const at::Tensor* residual_arg = residual != nullptr ? &residual_kept : nullptr;
    std::string why_not;
    const c10::MemoryFormat format = layout_ == ResultLayout::ChannelsLast ? c10::MemoryFormat::ChannelsLast
                                     : layout_ == ResultLayout::Contiguous ? c10::MemoryFormat::Contiguous
                                                                           : input.suggest_memory_format();
    at::Tensor got;
    auto partition = OnednnConvPartition::compile(site_, input_kept, residual_arg, format, got, why_not);
    const torch::jit::Stack arguments(stack.end() - static_cast<std::ptrdiff_t>(conv_arguments_ + (residual ? 1 : 0)),
        stack.end());
    run_generated(stack); // the reference, and the result if the partition is not kept
    if (partition && multiply_adds(stack.back().toTensor()) < kRaceBelowMacs &&
        !compiled_is_faster(*partition, arguments, input_kept, residual_arg)) {
      why_not = "the generated kernels were faster for this shape";
      partition.reset();
    }
    if (partition) {
      at::Tensor expected = stack.back().toTensor();
      if (agrees(got, expected)) { // (agrees consumes `expected`)
        stack.back() = std::move(got); // the layout later calls produce, so the next site prepares once
        prepared->partition = std::move(partition);
      } else {
        why_not = "its result differed from the generated kernels' beyond 1e-5";
        torch::jit::Stack again = arguments;
        run_generated_kernels(again);
        stack.back() = std::move(again.back());
      }
    }
    if (!why_not.empty()) {
      notes_.push_back(describe(input_kept) + ": " + why_not);
    }
    last_.store(prepared.get(), std::memory_order_release);
    prepared_.push_back(std::move(prepared));
    prepare_ms_ += ms_since(start);
  }

  // For a cheap call, where the compiled kernel's fixed cost per call can outweigh what it saves: whether it beats
  // the generated kernels, each timed over a few runs on this call's own tensors (the best run of each).
  bool compiled_is_faster(const OnednnConvPartition& partition, const torch::jit::Stack& arguments,
      const at::Tensor& input, const at::Tensor* residual) const {
    double compiled = INFINITY, generated = INFINITY;
    partition.run(input, residual); // oneDNN finishes preparing the weight on the run after compiling
    for (int round = 0; round < kRaceRounds; ++round) {
      auto start = std::chrono::steady_clock::now();
      partition.run(input, residual);
      compiled = std::min(compiled, ms_since(start));
      torch::jit::Stack stack = arguments;
      start = std::chrono::steady_clock::now();
      run_generated_kernels(stack);
      generated = std::min(generated, ms_since(start));
    }
    return compiled < generated;
  }

  // The convolution's multiply-adds for a result of these sizes.
  double multiply_adds(const at::Tensor& result) const {
    return static_cast<double>(result.numel()) * static_cast<double>(site_.weight.numel() / site_.weight.size(0));
  }

  static std::string describe(const at::Tensor& t) {
    std::ostringstream out;
    out << "input " << t.sizes() << " strides " << t.strides() << " " << t.scalar_type();
    return out.str();
  }

  ConvSite site_;
  size_t conv_arguments_;
  StackOperation conv_, post_op_;
  ResultLayout layout_;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<Prepared>> prepared_; // appended under the mutex, never removed
  mutable std::atomic<const Prepared*> last_{nullptr};
  mutable std::atomic<int64_t> specialized_calls_{0}, generated_calls_{0};
  mutable std::vector<std::string> notes_;
  mutable double prepare_ms_ = 0; // compiling and checking, over every shape
};

namespace {

// Adds an operator table entry for one instruction (the table is shared by every call of an operator) and
// points the instruction at it.
void rebind_instruction(torch::jit::mobile::Code& code, size_t pc, StackOperation op) {
  auto& inst = code.instructions_[pc];
  code.op_names_.push_back(code.op_names_[inst.X]);
  code.operator_input_sizes_.push_back(code.operator_input_sizes_[inst.X]);
  code.operators_.push_back(std::move(op));
  inst.X = static_cast<int>(code.operators_.size() - 1);
}

bool model_is_layout_sensitive(const torch::jit::mobile::Module& module) {
  for (const torch::jit::mobile::Function* function : functions_to_run(module)) {
    for (const auto& name : function->get_code().op_names_) {
      if (is_layout_sensitive(op_display_name(name))) {
        return true;
      }
    }
  }
  return false;
}

std::string runs_description(const ConvSite& site) {
  if (site.post_op == PostOp::None) {
    return "static+onednn(conv2d)";
  }
  return "static+fused(conv2d," + short_name(site.post_op_operator) + ")";
}

ResultLayout layout_of(size_t site, const SiteDataflow& flow, bool model_minds_layout) {
  if (flow.feeds_only_sites[site] || (flow.escapes_only_to_layout_free_ops[site] && !model_minds_layout)) {
    return ResultLayout::ChannelsLast;
  }
  const int from = flow.input_from_site[site];
  return from >= 0 && flow.feeds_only_sites[from] ? ResultLayout::Contiguous : ResultLayout::AsInput;
}

} // namespace

std::shared_ptr<Specialization> specialize_call_sites(torch::jit::mobile::Module& module, const ReturnCount& returns_of) {
  auto result = std::make_shared<Specialization>();
  if (!onednn_graph_available()) {
    return result;
  }
  // A channels_last result may also go to a permute (an SSD head's permute-reshape is then a view, not a copy),
  // unless the model calls an operator that minds layouts somewhere (what the permute's result reaches is not
  // traced). Elsewhere a channels_last tensor can cost more than it saves (small elementwise ops run slower on it).
  const bool model_minds_layout = model_is_layout_sensitive(module);
  for (torch::jit::mobile::Function* function : functions_to_run(module)) {
    auto& code = const_cast<torch::jit::mobile::Function*>(function)->get_code();
    std::vector<ConvSite> sites = find_conv_sites(code);
    const SiteDataflow flow = trace_site_results(code, sites, returns_of); // before any instruction is re-bound
    for (size_t index = 0; index < sites.size(); ++index) {
      ConvSite& site = sites[index];
      const ResultLayout layout = layout_of(index, flow, model_minds_layout);
      result->returns_channels_last_ |= layout == ResultLayout::ChannelsLast && !flow.feeds_only_sites[index];
      const auto& conv_inst = code.instructions_[site.conv_instruction];
      const int given = code.operator_input_sizes_[conv_inst.X];
      const size_t conv_arguments = given < 0 ? 7 : static_cast<size_t>(given);
      StackOperation conv = code.operators_[conv_inst.X];
      StackOperation post_op;
      if (site.post_op != PostOp::None) {
        post_op = code.operators_[code.instructions_[site.post_op_instruction].X];
      }
      Specialization::Site entry;
      entry.report.function = function->qualname().qualifiedName();
      entry.report.instruction = site.conv_instruction;
      entry.report.fused = {"aten::conv2d"};
      entry.report.runs = runs_description(site);
      entry.report.result_layout = result_layout_name(layout);
      if (site.post_op != PostOp::None) {
        entry.report.fused.push_back(site.post_op_operator);
        entry.report.fused_instruction = site.post_op_instruction;
        // The post-op's own instruction only drops the constants pushed for it: the site ran it.
        const size_t constants = site.post_op_arguments.size();
        rebind_instruction(code, site.post_op_instruction,
            [constants](torch::jit::Stack& stack) { torch::jit::drop(stack, constants); });
      }
      const size_t conv_pc = site.conv_instruction;
      entry.kernel = std::make_shared<ConvSiteKernel>(
          std::move(site), conv_arguments, std::move(conv), std::move(post_op), layout);
      rebind_instruction(code, conv_pc, [kernel = entry.kernel](torch::jit::Stack& stack) { (*kernel)(stack); });
      result->sites_.push_back(std::move(entry));
    }
  }
  return result;
}

std::vector<SpecializedCallSite> Specialization::sites() const {
  std::vector<SpecializedCallSite> reports;
  for (const Site& site : sites_) {
    SpecializedCallSite report = site.report;
    report.specialized_calls = site.kernel->specialized_calls();
    report.generated_calls = site.kernel->generated_calls();
    report.notes = site.kernel->notes();
    report.prepare_ms = site.kernel->prepare_ms();
    reports.push_back(std::move(report));
  }
  return reports;
}

const std::string* Specialization::runs(const std::string& function, size_t instruction) const {
  for (const Site& site : sites_) {
    if (site.report.function == function &&
        (site.report.instruction == instruction ||
            (site.report.fused.size() > 1 && site.report.fused_instruction == instruction))) {
      return &site.report.runs;
    }
  }
  return nullptr;
}

namespace {

bool is_channels_last_only(const at::Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(c10::MemoryFormat::ChannelsLast);
}

} // namespace

bool inputs_are_stock_layout(const std::vector<c10::IValue>& inputs) {
  return std::none_of(inputs.begin(), inputs.end(),
      [](const c10::IValue& input) { return input.isTensor() && is_channels_last_only(input.toTensor()); });
}

c10::IValue restore_stock_layout(c10::IValue output) {
  if (output.isTensor()) {
    return is_channels_last_only(output.toTensor()) ? c10::IValue(output.toTensor().contiguous()) : output;
  }
  if (output.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& element : output.toTupleRef().elements()) {
      elements.push_back(restore_stock_layout(element));
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  // New containers: a returned list or dict may be the model's own attribute.
  if (output.isList()) {
    const auto list = output.toList();
    c10::impl::GenericList restored(list.elementType());
    for (const c10::IValue& element : list.vec()) {
      restored.push_back(restore_stock_layout(element));
    }
    return restored;
  }
  if (output.isGenericDict()) {
    const auto dict = output.toGenericDict();
    c10::impl::GenericDict restored(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) {
      restored.insert(entry.key(), restore_stock_layout(entry.value()));
    }
    return restored;
  }
  return output;
}

} // namespace lightweight_dispatch
