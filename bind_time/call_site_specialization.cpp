#include <bind_time/call_site_specialization.h>

#include <bind_time/onednn_partition.h>
#include <bind_time/operator_facts.h>
#include <bind_time/preparation_run.h>
#include <bind_time/race.h>
#include <bind_time/result_check.h>
#include <bind_time/test_hooks.h>
#include <runtime/op_binding.h>
#include <runtime/tensor_tree.h>

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/core/stack.h>
#include <ATen/record_function.h>
#include <torch/csrc/jit/mobile/code.h>
#include <torch/csrc/jit/mobile/function.h>

#include <algorithm>
#include <set>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>

namespace lightweight_dispatch {

using StackOperation = std::function<void(torch::jit::Stack&)>; // an operator table entry

namespace {

// Shapes a site keeps a compiled partition for; a site called with more runs its generated kernels for them.
constexpr size_t kMaxShapesPerSite = 4;

// The chain a partition is compiled from: the sites themselves, or with the test hook a copy whose first weight
// is wrong.
class WrongWeights {
 public:
  explicit WrongWeights(const SiteChain& chain) : chain_(chain) {
    if (test_asks_for_wrong_weights()) {
      first_ = *chain.front();
      first_.weight = first_.weight.mul(2.0);
      first_.conv_arguments[0] = first_.weight;
      chain_.front() = &first_;
    }
  }
  const SiteChain& chain() const {
    return chain_;
  }

 private:
  SiteChain chain_;
  WeightSite first_;
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string short_name(const std::string& op) {
  const auto colons = op.find("::");
  return colons == std::string::npos ? op : op.substr(colons + 2);
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

// The races' outcomes, shared by the sites of one model: two sites computing the same problem (the same operators,
// weight sizes and parameters, input and residual sizes and strides, result layout and thread count) time the
// same, so the first one raced decides for the others. A site whose problem lost skips compiling; one whose
// problem won skips the race (its kernel is still checked). Only speed is shared, never a kernel or a check.
class RaceVerdicts {
 public:
  struct Verdict {
    bool compiled_won = false;
    std::string where; // the site raced: "function, instruction N"
    bool apart_won = false; // a pair's sites ran faster as two kernels than as one (SiteKernel::pair_may_run_apart_)
  };
  std::optional<Verdict> find(const std::string& problem) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = verdicts_.find(problem);
    return found == verdicts_.end() ? std::nullopt : std::optional<Verdict>(found->second);
  }
  void record(const std::string& problem, Verdict verdict) {
    std::lock_guard<std::mutex> lock(mutex_);
    verdicts_.emplace(problem, std::move(verdict));
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Verdict> verdicts_;
};

// The layout a site gives its result.
enum class ResultLayout {
  ChannelsLast, // it only feeds other sites (or permutes, in a model with no operator that minds layouts)
  Contiguous,   // it reaches other operators, and its input came channels_last from a site: the stock kernels
                // would have had (and returned) a contiguous tensor, in a run given stock-layout inputs (in a
                // run given channels_last ones, the input's layout, as the stock kernels carry it on)
  AsInput,      // it reaches other operators: as the kernels would lay it out from this input
};

// The layout the generated kernels give a ChannelsLast site's result.
enum class GeneratedLayout {
  AsPlanned, // channels_last, for the compiled kernels and channels_last pools that follow once the shape is prepared
  Stock,     // as the stock kernels give it: a caller's call on a shape not prepared yet, or any call of a run the
             // model check keeps off the compiled kernels, whose later sites run their generated kernels too, and
             // LibTorch's conv copies its weight to channels_last on every call given a channels_last input
             // (ResNet-18's first run, weights 45 MB: 80 ms against 55 without the stage)
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

// One site of a kernel's chain, with the generated operators its instructions were bound to.
struct ChainLink {
  WeightSite site;
  StackOperation conv;
  std::vector<StackOperation> post_ops; // per site.post_ops
};

// The operator a specialised conv2d site (or chain of sites) is re-bound to: the call instruction of its last
// conv2d, or that site's residual add where the residual comes from a register after the call
// (WeightSite::runs_at_add). At the call, its stack holds what that generated conv2d kernel would pop (the chain's
// input, passed through by the earlier sites' instructions, and the last site's constants) and, for a fused add,
// the residual beneath; at the add, only the chain's input and the residual, in the order the add takes them.
class SiteKernel {
 public:
  // `prepare_on_first_call`: a call meeting a new shape compiles for it; otherwise only a preparation run does
  // (background_preparation.h), and other calls run the generated kernels until it has.
  // `note`: why it is not one kernel with the site that follows, or "".
  // `verdicts`: the races of the model's sites so far; `where`: this site, as a verdict names it.
  SiteKernel(std::vector<ChainLink> chain, ResultLayout layout, bool prepare_on_first_call, const std::string& note,
      std::shared_ptr<RaceVerdicts> verdicts, std::string where)
      : chain_(std::move(chain)), frame_(frame_of(chain_.back().site)), runs_at_add_(chain_.back().site.runs_at_add()),
        pair_may_run_apart_(chain_.size() == 2 &&
                            (!chain_.front().site.only_clamping_post_ops() || !is_depthwise(chain_.back().site))),
        layout_(layout), prepare_on_first_call_(prepare_on_first_call), verdicts_(std::move(verdicts)),
        where_(std::move(where)) {
    if (!note.empty()) {
      notes_.push_back(note);
    }
    for (const ChainLink& link : chain_) {
      chain_view_.push_back(&link.site);
    }
  }

  void operator()(torch::jit::Stack& stack) const {
    // Bound to a residual add's instruction, the kernel computes the conv before it: per-operator profiles
    // (lite_predictor --profile-ops) count its time as the conv's.
    std::optional<at::RecordFunction> as_the_conv;
    if (runs_at_add_) {
      as_the_conv.emplace(at::RecordScope::LITE_INTERPRETER);
      if (as_the_conv->isActive()) {
        as_the_conv->before(std::string_view(chain_.back().site.op_name()), c10::ArrayRef<const c10::IValue>{});
      }
    }
    const size_t start = stack.size() - frame_.size;
    const c10::IValue& input_value = stack[start + frame_.input];
    const bool adds = chain_.back().site.adds();
    const c10::IValue* residual_value = adds ? &stack[start + frame_.residual] : nullptr;
    if (!input_value.isTensor() || (adds && !residual_value->isTensor())) {
      run_generated(stack);
      return;
    }
    if (!compiled_kernels_allowed()) {
      // The model check found the runs faster without the compiled kernels, or times a run without them
      // (model_check.h): the generated kernels in the stock layouts, as without the stage.
      run_generated(stack, GeneratedLayout::Stock);
      return;
    }
    const at::Tensor& input = input_value.toTensor();
    const at::Tensor* residual = adds ? &residual_value->toTensor() : nullptr;
    if (const Prepared* prepared = find_prepared(input, residual)) {
      run_prepared(*prepared, input, residual, stack);
    } else if ((prepare_on_first_call_ || in_preparation_run()) && !in_comparison_run()) {
      note_stage_decision();
      prepare_and_run(input, residual, stack);
    } else {
      note_stage_decision();
      note_unprepared_shape(); // a preparation run on this call's inputs will prepare it
      run_generated(stack, GeneratedLayout::Stock);
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
  int64_t preparations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return preparations_;
  }

 private:
  // Where the kernel's values lie on the stack when it runs: the last `size` values, the input and the residual
  // (if it adds one) at these offsets among them, the rest the last site's constants.
  struct Frame {
    size_t size = 0;
    size_t input = 0;
    size_t residual = 0;
    bool residual_on_top = false; // the generated path pushes it again just before the add
  };

  // Whether the last site's add writes its residual in place (its generated path changes that tensor).
  bool writes_residual() const {
    const FusedPostOp* add = chain_.back().site.residual_add();
    return add != nullptr && add->writes_residual;
  }

  // `arguments` (a kernel frame) for one more run of the generated kernels: the residual copied where they write it.
  torch::jit::Stack fresh_copy(const torch::jit::Stack& arguments) const {
    torch::jit::Stack copy = arguments;
    if (writes_residual()) {
      copy[frame_.residual] = copy[frame_.residual].toTensor().clone();
    }
    return copy;
  }

  static Frame frame_of(const WeightSite& last) {
    const FusedPostOp* add = last.residual_add();
    if (add == nullptr) {
      return {1 + last.conv_arguments.size(), 0, 0, false};
    }
    switch (add->residual_push) {
      case ResidualPush::BeforeCall:
        return {2 + last.conv_arguments.size(), 1, 0, false};
      case ResidualPush::AfterCall:
        return {2, 0, 1, true};
      case ResidualPush::UnderResult:
        return {2, 1, 0, false};
    }
    return {};
  }

  struct Prepared {
    TensorShape input;
    std::optional<TensorShape> residual;
    bool stock_run = true; // prepared in a run given stock-layout inputs (a Contiguous result's layout depends on it)
    std::unique_ptr<OnednnPartition> partition; // null: this shape runs the generated kernels
    // A pair's sites each compiled alone (OnednnPartition::compile_each), while a race between that and
    // `partition` (both sites in one kernel) is pending; `apart_serves` once it won. Never released either.
    std::unique_ptr<OnednnPartition> apart;
    std::atomic<bool> apart_serves{false};
    const OnednnPartition& serving() const {
      return apart && apart_serves.load(std::memory_order_acquire) ? *apart : *partition;
    }
    // A partition checked in a preparation run on several threads and not yet raced (race_on_callers_thread):
    // the caller's next call of this shape races it. Once it has, `partition` serves only if `compiled_won`.
    // The partition itself is never released: another thread may be running it.
    std::atomic<bool> race_pending{false};
    std::atomic<bool> compiled_won{true};
    bool lost_a_race = false; // a race on the caller's thread went to the generated kernels once: one more decides
    std::string problem; // what a race of this shape times (problem_of), for a pending race's verdict
    bool matches(const at::Tensor& in, const at::Tensor* res, bool stock) const {
      return input.matches(in) && (res == nullptr || (residual && residual->matches(*res))) && stock_run == stock;
    }
  };

  // The layout the result is given: a Contiguous site's is the input's in a run whose caller gave channels_last
  // inputs (the stock kernels then carry that layout on).
  c10::MemoryFormat result_format(const at::Tensor& input) const {
    if (layout_ == ResultLayout::ChannelsLast) {
      return c10::MemoryFormat::ChannelsLast;
    }
    return layout_ == ResultLayout::Contiguous && run_inputs_stock_layout() ? c10::MemoryFormat::Contiguous
                                                                            : input.suggest_memory_format();
  }

  // A shape prepared already: its compiled partition, or the generated kernels.
  void run_prepared(const Prepared& prepared, const at::Tensor& input, const at::Tensor* residual,
      torch::jit::Stack& stack) const {
    if (prepared.race_pending.load(std::memory_order_acquire) && !in_preparation_run()) {
      note_stage_decision(); // a run with a race to come is not one the next runs repeat
      if (preparation_runs_in_flight() > 0 || in_comparison_run()) {
        // A preparation run (this model's or another's) is compiling beside this call, with an OpenMP team of its
        // own on the same cores: a race now would time both sides slowed and disturbed. In the benchmark's server,
        // which runs on without waiting for the preparation, 6 of DistilBERT's 36 linear sites lost their race
        // that way at 2 threads (a run 64.5 ms against 57-60 with all of them compiled). The race waits for a
        // call with no preparation run in flight; until then the shape runs the generated kernels.
        run_generated(stack);
        return;
      }
      race_on_this_call(const_cast<Prepared&>(prepared), input, residual, stack);
    }
    if (!prepared.partition || !prepared.compiled_won) {
      run_generated(stack);
      return;
    }
    at::Tensor result = prepared.serving().run(input, residual);
    torch::jit::drop(stack, frame_.size);
    torch::jit::push(stack, std::move(result));
    note_compiled_call();
    if (in_callers_run()) { // the caller's calls only
      specialized_calls_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // The generated kernels, as the sites would run without the stage.
  void run_generated(torch::jit::Stack& stack, GeneratedLayout layout = GeneratedLayout::AsPlanned) const {
    if (in_callers_run()) { // the caller's calls only
      generated_calls_.fetch_add(1, std::memory_order_relaxed);
    }
    run_generated_kernels(stack, layout);
  }

  // Each site's generated conv2d and post-op in turn, on the chain's input: the same calls with the same
  // constants and operands, in the same order, as the sites' own instructions would make.
  void run_generated_kernels(torch::jit::Stack& stack, GeneratedLayout layout = GeneratedLayout::AsPlanned) const {
    std::optional<c10::IValue> residual_on_top;
    if (frame_.residual_on_top) {
      residual_on_top = torch::jit::pop(stack); // pushed again for the add, as its instruction found it
    }
    // The last site's constants, pushed again below (at its add, the call already dropped them).
    torch::jit::drop(stack, frame_.size - 1 - (chain_.back().site.adds() ? 1 : 0));
    for (const ChainLink& link : chain_) {
      stack.insert(stack.end(), link.site.conv_arguments.begin(), link.site.conv_arguments.end());
      link.conv(stack);
      for (size_t i = 0; i < link.post_ops.size(); ++i) {
        const FusedPostOp& post_op = link.site.post_ops[i];
        if (post_op.op == PostOp::Add && residual_on_top) {
          torch::jit::push(stack, *residual_on_top);
        }
        stack.insert(stack.end(), post_op.arguments.begin(), post_op.arguments.end());
        link.post_ops[i](stack);
      }
    }
    if (layout_ == ResultLayout::Contiguous && run_inputs_stock_layout() && !stack.back().toTensor().is_contiguous()) {
      stack.back() = stack.back().toTensor().contiguous(); // given a site's channels_last result
    }
    // A result that only sites and layout-following operations see is given the layout they were planned for,
    // whichever kernels made it: a contiguous one (a generated conv on the caller's contiguous image) makes each of
    // them slower (the max_pool2d after ResNet-18's stem: 1.3 ms a run on it, 0.4 on channels_last; RegNet's next
    // convs compiled for a contiguous input), and the race against a compiled kernel then compares two kernels
    // delivering the same layout rather than charging the compiled one alone for the layout its consumers want.
    // Not on a caller's call of a shape not prepared yet (GeneratedLayout::Stock): its consumers run generated too.
    if (layout_ == ResultLayout::ChannelsLast && layout == GeneratedLayout::AsPlanned) {
      const at::Tensor& result = stack.back().toTensor();
      if (result.dim() == 4 && !result.is_contiguous(c10::MemoryFormat::ChannelsLast)) {
        stack.back() = at::empty(result.sizes(), result.options().memory_format(c10::MemoryFormat::ChannelsLast))
                           .copy_(result);
      }
    }
  }

  // What these tensors' shape was prepared with (a null partition: the generated kernels), or null if it was
  // not prepared yet.
  const Prepared* find_prepared(const at::Tensor& input, const at::Tensor* residual) const {
    const Prepared* last = last_.load(std::memory_order_acquire);
    if (last != nullptr && last->matches(input, residual, run_inputs_stock_layout())) {
      return last;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    return find_prepared_locked(input, residual);
  }

  const Prepared* find_prepared_locked(const at::Tensor& input, const at::Tensor* residual) const {
    for (const auto& prepared : prepared_) {
      if (prepared->matches(input, residual, run_inputs_stock_layout())) {
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
    prepared->stock_run = run_inputs_stock_layout();
    if (residual != nullptr) {
      prepared->residual = TensorShape::of(*residual);
    }
    // The generated kernels pop these from the stack: keep them for the check. An add that writes its residual
    // changes the caller's tensor on the generated path: the checks and races run on copies of it as it was.
    const at::Tensor input_kept = input;
    const at::Tensor residual_kept =
        residual == nullptr ? at::Tensor() : (writes_residual() ? residual->clone() : *residual);
    const at::Tensor* residual_arg = residual != nullptr ? &residual_kept : nullptr;
    std::string why_not;
    const c10::MemoryFormat format = result_format(input);
    const std::string problem = problem_of(input_kept, residual_arg, format);
    const std::optional<RaceVerdicts::Verdict> verdict = test_asks_for_no_race() ? std::nullopt : verdicts_->find(problem);
    if (verdict && !verdict->compiled_won) { // nothing to compile: the generated kernels serve this shape
      run_generated(stack);
      notes_.push_back(describe(input_kept) + ": timed at " + verdict->where +
                       " (the same problem): the generated kernels were faster for this shape");
      finish_preparing(std::move(prepared), start);
      return;
    }
    at::Tensor got;
    const WrongWeights wrong_weights(chain_view_); // none, unless a test asks for them
    // A pair that may run apart: both ways, unless a site of the same problem settled which.
    std::unique_ptr<OnednnPartition> partition;
    if (!verdict || !verdict->apart_won) {
      partition = OnednnPartition::compile(wrong_weights.chain(), input_kept, residual_arg, format, got, why_not);
    }
    std::unique_ptr<OnednnPartition> apart;
    at::Tensor got_apart;
    std::string why_not_apart;
    if (pair_may_run_apart_ && (!verdict || verdict->apart_won)) {
      apart = OnednnPartition::compile_each(wrong_weights.chain(), input_kept, residual_arg, format, got_apart,
                                            why_not_apart);
    }
    torch::jit::Stack arguments(stack.end() - static_cast<std::ptrdiff_t>(frame_.size), stack.end());
    if (residual != nullptr) {
      arguments[frame_.residual] = residual_kept;
    }
    run_generated(stack); // the reference, and the result if the partition is not kept
    static const char* const kProbeDiffers =
        "its result on a probe input (seeded random values at this shape) differed from the generated kernels' "
        "beyond 1e-5";
    if (partition && !agrees_on_a_probe(*partition, arguments, input_kept, residual_arg)) {
      why_not = kProbeDiffers;
      partition.reset();
    }
    if (apart) {
      at::Tensor expected = stack.back().toTensor().clone();
      if (!agrees_on_a_probe(*apart, arguments, input_kept, residual_arg)) {
        why_not_apart = kProbeDiffers;
        apart.reset();
      } else if (!agrees_within_tolerance(got_apart, expected)) {
        why_not_apart = "its result differed from the generated kernels' beyond 1e-5";
        apart.reset();
      }
    }
    if (pair_may_run_apart_ && !why_not_apart.empty()) {
      notes_.push_back(describe(input_kept) + ": the pair's sites as two kernels: " + why_not_apart);
    }
    if (!partition && apart) { // the only candidate left
      if (!why_not.empty()) {
        notes_.push_back(describe(input_kept) + ": the pair in one kernel: " + why_not + "; it runs as two kernels");
        why_not.clear();
      }
      partition = std::move(apart);
      got = std::move(got_apart);
      if (verdict) {
        notes_.push_back(describe(input_kept) + ": timed at " + verdict->where + " (the same problem): " + kRanApart);
      }
    }
    const bool race_later = partition && !verdict && !test_asks_for_no_race() && race_on_callers_thread();
    if (partition && apart && !race_later) { // one kernel or two: decided now
      const bool apart_won = test_asks_for_no_race() ? test_asks_pairs_to_run_apart()
                                                      : apart_is_faster(*apart, *partition, input_kept, residual_arg);
      if (apart_won) {
        partition = std::move(apart);
        got = std::move(got_apart);
        notes_.push_back(describe(input_kept) + ": " + kRanApart);
      }
      apart.reset();
    }
    if (partition && !verdict && !test_asks_for_no_race() && !race_later) {
      const bool compiled_won = compiled_is_faster(*partition, arguments, input_kept, residual_arg);
      verdicts_->record(problem, {compiled_won, where_, partition_runs_apart(*partition)});
      if (!compiled_won) {
        why_not = "the generated kernels were faster for this shape";
        partition.reset();
      }
    }
    if (partition) {
      at::Tensor expected = stack.back().toTensor();
      if (agrees_within_tolerance(got, expected)) { // (it consumes `expected`)
        stack.back() = std::move(got); // the layout later calls produce, so the next site prepares once
        prepared->partition = std::move(partition);
      } else if (apart) { // the pair's two kernels agreed on these tensors (checked above): they serve
        notes_.push_back(describe(input_kept) +
                         ": the pair in one kernel: its result differed from the generated kernels' beyond 1e-5; it "
                         "runs as two kernels");
        stack.back() = std::move(got_apart);
        prepared->partition = std::move(apart);
      } else {
        why_not = "its result differed from the generated kernels' beyond 1e-5";
        torch::jit::Stack again = fresh_copy(arguments);
        run_generated_kernels(again);
        stack.back() = std::move(again.back());
      }
    }
    // A race left for the caller's thread, once something is kept to race (a kernel refused by the last check
    // leaves none: the shape runs the generated kernels).
    if (race_later && prepared->partition) {
      prepared->race_pending.store(true, std::memory_order_release);
      prepared->problem = problem;
      prepared->apart = std::move(apart);
    }
    if (!why_not.empty()) {
      notes_.push_back(describe(input_kept) + ": " + why_not);
    }
    finish_preparing(std::move(prepared), start);
  }

  // Whether a race run now would time something else than the caller's calls will run: any preparation run, on
  // its thread of its own. With more than one intra-op thread its OpenMP team is a second one beside the
  // caller's, and libgomp, with more team threads than cores, stops spinning between parallel regions and wakes
  // its workers through the kernel each time: on 2 cores every kernel timed 2-3x slower there than on the
  // caller's thread, the compiled ones most, and RegNet-X kept the generated kernels at 13 sites where the
  // caller's thread measured the compiled ones faster (6.3 against 5.3 ms a run). With one thread it times
  // alike when nothing else runs, but it runs beside the caller's calls, and an app (the benchmark's server,
  // stopped while the peers run) may be paused in the middle of it: in the benchmark at 1 thread, ResNet-18 as
  // saved kept the generated kernels at 4 of its 21 sites, the frozen one at none (the same problems).
  bool race_on_callers_thread() const {
    return in_preparation_run();
  }

  // The race a preparation run left for the caller's thread, on this call's tensors (still untouched on the
  // stack): the verdict of a site computing the same problem if one was raced meanwhile, else a race here.
  void race_on_this_call(Prepared& prepared, const at::Tensor& input, const at::Tensor* residual,
      torch::jit::Stack& stack) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!prepared.race_pending.load(std::memory_order_acquire)) {
      return; // another thread raced it
    }
    const auto start = std::chrono::steady_clock::now();
    std::string why_not;
    if (const std::optional<RaceVerdicts::Verdict> verdict = verdicts_->find(prepared.problem)) {
      prepared.compiled_won = verdict->compiled_won;
      if (prepared.apart && verdict->apart_won) {
        prepared.apart_serves.store(true, std::memory_order_release);
        notes_.push_back(describe(input) + ": timed at " + verdict->where + " (the same problem): " + kRanApart);
      }
      why_not = "timed at " + verdict->where + " (the same problem): the generated kernels were faster for this shape";
    } else {
      torch::jit::Stack arguments(stack.end() - static_cast<std::ptrdiff_t>(frame_.size), stack.end());
      const at::Tensor residual_kept =
          residual == nullptr ? at::Tensor() : (writes_residual() ? residual->clone() : *residual);
      if (residual != nullptr) {
        arguments[frame_.residual] = residual_kept;
      }
      const at::Tensor* residual_arg = residual != nullptr ? &residual_kept : nullptr;
      if (prepared.apart) { // one kernel or two, first
        const bool apart_won = apart_is_faster(*prepared.apart, *prepared.partition, input, residual_arg);
        if (apart_won && !prepared.apart_serves.load(std::memory_order_acquire)) {
          notes_.push_back(describe(input) + ": " + kRanApart);
        }
        prepared.apart_serves.store(apart_won, std::memory_order_release);
      }
      prepared.compiled_won = compiled_is_faster(prepared.serving(), arguments, input, residual_arg);
      if (!prepared.compiled_won && !prepared.lost_a_race) {
        // A lost race is run once more, on a later call, before it stands: on a busy machine one moment's noise
        // can cover both of the compiled kernel's runs (the race stops after two rounds once a side looks 1.3x
        // ahead), and the verdict holds for every site of the problem (DistilBERT's six linear + gelu sites ran
        // the generated kernels in some benchmark runs at 2 threads, 65.8 ms a run against 56.7). This call runs
        // the generated kernels.
        prepared.lost_a_race = true;
        prepare_ms_ += ms_since(start);
        return; // still pending
      }
      verdicts_->record(prepared.problem, {prepared.compiled_won, where_, partition_runs_apart(prepared.serving())});
      why_not = "timed on the caller's thread: the generated kernels were faster for this shape";
    }
    if (!prepared.compiled_won) {
      notes_.push_back(describe(input) + ": " + why_not);
    }
    prepare_ms_ += ms_since(start);
    prepared.race_pending.store(false, std::memory_order_release);
  }

  // Keeps what a shape was prepared with (under the mutex).
  void finish_preparing(std::unique_ptr<Prepared> prepared, std::chrono::steady_clock::time_point start) const {
    last_.store(prepared.get(), std::memory_order_release);
    prepared_.push_back(std::move(prepared));
    prepare_ms_ += ms_since(start);
    preparations_ += 1;
  }

  // What a race on these tensors times: every operator of the chain with its weight sizes and parameters, the
  // input's and residual's sizes, strides and dtype, the result layout and the thread count.
  std::string problem_of(const at::Tensor& input, const at::Tensor* residual, c10::MemoryFormat format) const {
    std::ostringstream out;
    for (const ChainLink& link : chain_) {
      const WeightSite& site = link.site;
      out << site.op_name() << " w" << site.weight.sizes() << (site.bias ? " bias" : "") << " s"
          << c10::IntArrayRef(site.stride) << " p" << c10::IntArrayRef(site.padding) << " d"
          << c10::IntArrayRef(site.dilation) << " g" << site.groups;
      for (const FusedPostOp& post_op : site.post_ops) {
        out << " " << post_op_name(post_op.op);
      }
      out << "; ";
    }
    out << "in " << input.sizes() << input.strides() << input.scalar_type();
    if (residual != nullptr) {
      out << " res " << residual->sizes() << residual->strides() << residual->scalar_type();
    }
    out << " out " << format << " threads " << at::get_num_threads();
    return out.str();
  }

  // Whether the partition agrees with the generated kernels on a probe input of the stage's own: seeded random
  // values at the call's sizes, strides and dtype (and the same for a fused add's residual). A caller's first
  // input can hide a wrong kernel (zeros make a conv's result its bias alone, whatever the weight's layout); the
  // probe exercises every weight.
  bool agrees_on_a_probe(const OnednnPartition& partition, const torch::jit::Stack& arguments,
      const at::Tensor& input, const at::Tensor* residual) const {
    torch::jit::Stack probe_arguments = arguments;
    at::Tensor probe_residual;
    if (residual != nullptr) {
      probe_residual = probe_like(*residual, 1);
      probe_arguments[frame_.residual] = probe_residual;
    }
    const at::Tensor probe = probe_like(input);
    probe_arguments[frame_.input] = probe;
    const at::Tensor compiled = partition.run(probe, residual != nullptr ? &probe_residual : nullptr);
    run_generated_kernels(probe_arguments);
    at::Tensor expected = probe_arguments.back().toTensor();
    return agrees_within_tolerance(compiled, expected);
  }

  // Whether the compiled kernel beats the generated kernels, each timed on this call's own tensors (race.h).
  bool compiled_is_faster(const OnednnPartition& partition, const torch::jit::Stack& arguments,
      const at::Tensor& input, const at::Tensor* residual) const {
    partition.run(input, residual); // oneDNN finishes preparing the weight on the run after compiling
    torch::jit::Stack stack;
    const bool won = compiled_wins_race([&] { partition.run(input, residual); }, [&] { run_generated_kernels(stack); },
        [&] { stack = fresh_copy(arguments); });
    return won && !test_asks_generated_kernels_to_win();
  }

  // Whether a pair's sites run faster as two kernels than as one, each timed on this call's own tensors: one
  // kernel for both keeps the pointwise result in the cache, which won at every shape with ReLU or a clamp after
  // the 1x1 conv; with SiLU or hardswish it was measured ahead at EfficientNet-B0's 112x112 block and behind at a
  // 56x56 one. A near tie goes to the one kernel (what LibTorch's fuser makes of the pair).
  static bool apart_is_faster(const OnednnPartition& apart, const OnednnPartition& together, const at::Tensor& input,
      const at::Tensor* residual) {
    apart.run(input, residual);
    together.run(input, residual);
    return compiled_wins_race([&] { apart.run(input, residual); }, [&] { together.run(input, residual); });
  }

  // Whether `partition` runs the pair as two kernels (compile_each) rather than one.
  bool partition_runs_apart(const OnednnPartition& partition) const {
    return pair_may_run_apart_ && partition.kernel_count() > 1;
  }

  static constexpr const char* kRanApart =
      "the pair's sites run as two kernels, faster than one for this shape (both checked)";

  static std::string describe(const at::Tensor& t) {
    std::ostringstream out;
    out << "input " << t.sizes() << " strides " << t.strides() << " " << t.scalar_type();
    return out.str();
  }

  std::vector<ChainLink> chain_;
  SiteChain chain_view_; // into chain_
  Frame frame_;
  bool runs_at_add_;
  // A pointwise conv and the grouped conv it feeds, unless that is a depthwise conv and the pointwise conv's
  // activation ReLU or a clamp: every shape times them as one kernel against two (apart_is_faster).
  bool pair_may_run_apart_;
  ResultLayout layout_;
  bool prepare_on_first_call_;
  std::shared_ptr<RaceVerdicts> verdicts_;
  std::string where_;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<Prepared>> prepared_; // appended under the mutex, never removed
  mutable std::atomic<const Prepared*> last_{nullptr};
  mutable std::atomic<int64_t> specialized_calls_{0}, generated_calls_{0};
  mutable std::vector<std::string> notes_;
  mutable double prepare_ms_ = 0; // compiling and checking, over every shape
  mutable int64_t preparations_ = 0; // shapes compiled and checked
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

std::string runs_description(const std::vector<std::string>& fused) {
  if (fused.size() == 1) {
    return "static+onednn(" + short_name(fused[0]) + ")";
  }
  std::string names;
  for (const std::string& op : fused) {
    names += (names.empty() ? "" : ",") + short_name(op);
  }
  return "static+fused(" + names + ")";
}

// Whether any of `origins` (sites) gives its result channels_last.
bool any_channels_last(const std::vector<int>& origins, const std::vector<bool>& channels_last) {
  return std::any_of(origins.begin(), origins.end(), [&](int site) { return channels_last[static_cast<size_t>(site)]; });
}

// The first site's input is the chain's; the last site's result is its result. `channels_last`: per site, whether
// its result is channels_last (the last site of a chain laid out before this one).
ResultLayout layout_of(const std::vector<WeightSite>& sites, size_t first, size_t last, const SiteDataflow& flow,
    bool model_minds_layout, const std::vector<bool>& channels_last) {
  if (sites[last].op == SiteOp::Linear) {
    return ResultLayout::AsInput; // no channels to put last
  }
  if (flow.feeds_only_sites[last] || (flow.escapes_only_to_layout_free_ops[last] && !model_minds_layout)) {
    return ResultLayout::ChannelsLast;
  }
  // An operand channels_last because a site made it so (its result, or a value computed from it), where the stock
  // kernels would have had it contiguous: the generated kernels would carry that layout into this result (an add
  // takes its first operand's).
  const bool residual_made_channels_last = sites[last].adds() && any_channels_last(flow.residual_origins[last], channels_last);
  return any_channels_last(flow.input_origins[first], channels_last) || residual_made_channels_last
             ? ResultLayout::Contiguous
             : ResultLayout::AsInput;
}

// Why instruction `pc` of `code` may write a tensor, or "" if it cannot: an operator that may write one of its
// tensor arguments (operator_facts.h: in-place, out=, or unknown), or a call of another function.
std::string why_it_may_write(const torch::jit::mobile::Code& code, size_t pc, const OperatorSchema& schema_of) {
  const torch::jit::Instruction& inst = code.instructions_[pc];
  if (inst.op == torch::jit::CALL || inst.op == torch::jit::INTERFACE_CALL) {
    return "instruction " + std::to_string(pc) + " calls another function";
  }
  if (inst.op != torch::jit::OP && inst.op != torch::jit::OPN) {
    return "";
  }
  const std::string op = op_display_name(code.op_names_[inst.X]);
  const c10::FunctionSchema* schema = schema_of(op);
  if (schema == nullptr) {
    return "instruction " + std::to_string(pc) + " calls " + op + ", whose schema is unknown";
  }
  const OperatorFacts facts = operator_facts(*schema);
  const int given = inst.op == torch::jit::OPN ? static_cast<int>(inst.N) : code.operator_input_sizes_[inst.X];
  const size_t arguments = given < 0 ? schema->arguments().size() : static_cast<size_t>(given);
  for (size_t i = 0; i < arguments; ++i) {
    const bool container_only = !facts.may_alias_or_write_anything && i < schema->arguments().size() &&
                                writes_only_the_container(schema->arguments()[i].type());
    if (may_write_argument(*schema, facts, i) && !container_only) {
      return "instruction " + std::to_string(pc) + " (" + op + ") may write its arguments";
    }
  }
  return "";
}

// Whether no instruction of `code` may write a tensor, but the sites' fused operations (which write the site's
// own result inside its kernel, before anything else sees it).
bool writes_nothing(const torch::jit::mobile::Code& code, const std::vector<WeightSite>& sites,
    const OperatorSchema& schema_of) {
  std::set<size_t> fused;
  for (const WeightSite& site : sites) {
    for (const FusedPostOp& post_op : site.post_ops) {
      fused.insert(post_op.instruction);
    }
  }
  for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
    if (fused.count(pc) == 0 && !why_it_may_write(code, pc, schema_of).empty()) {
      return false;
    }
  }
  return true;
}

// The sites' dataflow, once every fused add that writes its residual in place is proven to write a tensor nothing
// else sees (SiteDataflow::residual_dies_at_add); a site whose add is not keeps only the post-ops before it, and
// the trace runs again on what is left.
SiteDataflow trace_until_residual_writes_proven(const torch::jit::mobile::Code& code, std::vector<WeightSite>& sites,
    const ReturnCount& returns_of, const OperatorSchema& schema_of, const std::set<size_t>& any_layout_calls,
    const std::set<size_t>& checked_layout_calls) {
  while (true) {
    SiteDataflow flow = trace_site_results(
        code, sites, returns_of, writes_nothing(code, sites, schema_of), any_layout_calls, checked_layout_calls);
    bool dropped = false;
    for (size_t i = 0; i < sites.size(); ++i) {
      const FusedPostOp* add = sites[i].residual_add();
      if (add != nullptr && add->writes_residual && !flow.residual_dies_at_add[i]) {
        auto& post_ops = sites[i].post_ops;
        post_ops.erase(post_ops.begin() + (add - post_ops.data()), post_ops.end());
        dropped = true;
      }
    }
    if (!dropped) {
      return flow;
    }
  }
}

// Why the 1x1 conv's input may change between its call and the grouped conv's, or "" if nothing can change it:
// run as one kernel, the pair reads that input at the grouped conv's kernel instruction (its call, or its add).
// Only constants, moves and operators that write nothing may lie between (the sites' own fused post-ops write
// their results, not that input).
std::string why_pair_input_may_change(const torch::jit::mobile::Code& code, const WeightSite& first,
    const WeightSite& second, const OperatorSchema& schema_of) {
  using torch::jit::OpCode;
  for (size_t pc = first.conv_instruction + 1; pc < second.kernel_instruction(); ++pc) {
    const auto fused_at_pc = [pc](const FusedPostOp& post_op) { return post_op.instruction == pc; };
    if (std::any_of(first.post_ops.begin(), first.post_ops.end(), fused_at_pc) ||
        std::any_of(second.post_ops.begin(), second.post_ops.end(), fused_at_pc) || pc == second.conv_instruction) {
      continue;
    }
    const OpCode op = code.instructions_[pc].op;
    const bool moves_or_constants = op == torch::jit::LOADC || op == torch::jit::LOAD || op == torch::jit::MOVE ||
                                    op == torch::jit::STORE || op == torch::jit::STOREN || op == torch::jit::DROP ||
                                    op == torch::jit::DROPR;
    if (moves_or_constants) {
      continue;
    }
    if (op != torch::jit::OP && op != torch::jit::OPN) {
      return "instruction " + std::to_string(pc) + " (a jump, call or other instruction not followed) lies between them";
    }
    std::string why = why_it_may_write(code, pc, schema_of);
    if (!why.empty()) {
      return why;
    }
  }
  return "";
}

// A kernel's sites (indices into the function's sites), and why it does not take in the site that follows.
struct Chain {
  std::vector<size_t> sites;
  std::string note;
};

// The sites of `sites` as the kernels they run in, in bytecode order: a pointwise conv whose result only feeds a
// grouped 3x3 conv (a depthwise one, or RegNet's) joins it, unless the pair's input may change between the two
// calls; every other site is a chain of its own.
std::vector<Chain> chains_of(const torch::jit::mobile::Code& code, const std::vector<WeightSite>& sites,
    const SiteDataflow& flow, const OperatorSchema& schema_of) {
  std::vector<Chain> chains;
  std::vector<bool> taken(sites.size(), false);
  for (size_t index = 0; index < sites.size(); ++index) {
    if (taken[index]) {
      continue;
    }
    const int next = flow.sole_consumer[index];
    if (next >= 0 && !taken[next] && pointwise_feeds_grouped_3x3(sites[index], sites[next])) {
      const std::string why_not = why_pair_input_may_change(code, sites[index], sites[next], schema_of);
      if (why_not.empty()) {
        chains.push_back({{index, static_cast<size_t>(next)}, ""});
        taken[next] = true;
        continue;
      }
      chains.push_back({{index}, std::string("not run in one kernel with the ") +
                                     (is_depthwise(sites[next]) ? "depthwise" : "grouped") + " conv at instruction " +
                                     std::to_string(sites[next].conv_instruction) + ": " + why_not});
      continue;
    }
    chains.push_back({{index}, ""});
  }
  return chains;
}

// An instruction whose operator the site's kernel runs elsewhere: it only drops the constants pushed for it
// (the value beneath, a chain's input, stays for the kernel).
void absorb_instruction(torch::jit::mobile::Code& code, size_t pc, size_t constants) {
  rebind_instruction(code, pc, [constants](torch::jit::Stack& stack) { torch::jit::drop(stack, constants); });
}


// The number of values an operator pushes, from its schema.
ReturnCount return_counts_from(const OperatorSchema& schema_of) {
  return [&schema_of](const std::string& op) -> std::optional<size_t> {
    const c10::FunctionSchema* schema = schema_of(op);
    return schema ? std::optional<size_t>(schema->returns().size()) : std::nullopt;
  };
}

// Re-binds every foldable call of `code` (none of `taken`) to a FoldedCall.
void fold_calls(torch::jit::mobile::Code& code, const std::string& function, const OperatorSchema& schema_of,
    const std::set<size_t>& taken,
    std::vector<Specialization::Folded>& folded) {
  for (size_t pc : find_foldable_calls(code, schema_of, taken)) {
    const auto& inst = code.instructions_[pc];
    const std::string op = op_display_name(code.op_names_[inst.X]);
    const c10::FunctionSchema* schema = schema_of(op);
    const int given = inst.op == torch::jit::OPN ? static_cast<int>(inst.N) : code.operator_input_sizes_[inst.X];
    const size_t inputs = given < 0 ? schema->arguments().size() : static_cast<size_t>(given);
    auto kernel = std::make_shared<FoldedCall>(code.operators_[inst.X], inputs, schema->returns().size());
    rebind_instruction(code, pc, [kernel](torch::jit::Stack& stack) { (*kernel)(stack); });
    folded.push_back({FoldedCallSite{function, pc, op, 0, 0}, std::move(kernel)});
  }
}

} // namespace

std::shared_ptr<Specialization> specialize_call_sites(torch::jit::mobile::Module& module,
    const OperatorSchema& schema_of, const GeneratedKernelOf& kernel_of, bool prepare_on_first_call,
    bool choose_quantized_engines) {
  // Quantized calls that may choose their engine, gathered over every function and packed together at the end.
  struct QuantizedCallIn {
    torch::jit::mobile::Code* code;
    std::string function;
    QuantizedWeightCall call;
  };
  std::vector<QuantizedCallIn> quantized_calls;
  auto result = std::make_shared<Specialization>();
  const auto verdicts = std::make_shared<RaceVerdicts>();
  const ReturnCount returns_of = return_counts_from(schema_of);
  // A channels_last result may also go to a permute (an SSD head's permute-reshape is then a view, not a copy),
  // unless the model calls an operator that minds layouts somewhere (what the permute's result reaches is not
  // traced). Elsewhere a channels_last tensor can cost more than it saves (small elementwise ops run slower on it).
  const bool model_minds_layout = model_is_layout_sensitive(module);
  for (torch::jit::mobile::Function* function : functions_to_run(module)) {
    auto& code = const_cast<torch::jit::mobile::Function*>(function)->get_code();
    const std::string function_name = function->qualname().qualifiedName();
    std::set<size_t> taken; // instructions the sites re-bind
    std::vector<WeightSite> sites = onednn_graph_available() ? find_weight_sites(code) : std::vector<WeightSite>{};
    // Before any instruction is re-bound.
    const std::vector<size_t> max_pools = find_max_pool_calls(code);
    const std::vector<size_t> average_pools = find_adaptive_avg_pool_calls(code);
    const std::vector<size_t> elementwise = find_in_place_candidates(code);
    const SiteDataflow flow = trace_until_residual_writes_proven(code, sites, returns_of, schema_of,
        std::set<size_t>(max_pools.begin(), max_pools.end()),
        std::set<size_t>(average_pools.begin(), average_pools.end()));
    std::vector<bool> channels_last(sites.size(), false); // per site, as laid out so far
    for (const Chain& found : chains_of(code, sites, flow, schema_of)) {
      const std::vector<size_t>& chain = found.sites;
      const ResultLayout layout = layout_of(sites, chain.front(), chain.back(), flow, model_minds_layout, channels_last);
      channels_last[chain.back()] = layout == ResultLayout::ChannelsLast;
      result->returns_channels_last_ |= layout == ResultLayout::ChannelsLast && !flow.feeds_only_sites[chain.back()];
      Specialization::Site entry;
      entry.report.function = function_name;
      entry.report.instruction = sites[chain.front()].conv_instruction;
      entry.report.result_layout = result_layout_name(layout);
      std::vector<ChainLink> links;
      for (size_t index : chain) {
        WeightSite& site = sites[index];
        ChainLink link;
        link.conv = code.operators_[code.instructions_[site.conv_instruction].X];
        entry.report.fused.push_back(site.op_name());
        entry.report.fused_instructions.push_back(site.conv_instruction);
        const size_t kernel_pc = site.kernel_instruction();
        for (const FusedPostOp& post_op : site.post_ops) {
          link.post_ops.push_back(code.operators_[code.instructions_[post_op.instruction].X]);
          entry.report.fused.push_back(post_op.operator_name);
          entry.report.fused_instructions.push_back(post_op.instruction);
          if (post_op.instruction != kernel_pc || index != chain.back()) {
            absorb_instruction(code, post_op.instruction, post_op.arguments.size());
          }
        }
        // An earlier site passes its input on to the last one's call; so does a call whose kernel runs at its add.
        if (index != chain.back() || kernel_pc != site.conv_instruction) {
          absorb_instruction(code, site.conv_instruction, site.conv_arguments.size());
        }
        link.site = std::move(site);
        links.push_back(std::move(link));
      }
      entry.report.runs = runs_description(entry.report.fused);
      taken.insert(entry.report.fused_instructions.begin(), entry.report.fused_instructions.end());
      const size_t call_pc = links.back().site.kernel_instruction();
      const std::string where = function_name + ", instruction " + std::to_string(entry.report.instruction);
      entry.kernel = std::make_shared<SiteKernel>(
          std::move(links), layout, prepare_on_first_call, found.note, verdicts, where);
      rebind_instruction(code, call_pc, [kernel = entry.kernel](torch::jit::Stack& stack) { (*kernel)(stack); });
      result->sites_.push_back(std::move(entry));
    }
    for (size_t pc : max_pools) {
      const auto& inst = code.instructions_[pc];
      const int given = code.operator_input_sizes_[inst.X];
      if (taken.count(pc) != 0 || given < 1) {
        continue;
      }
      // Fed by a site whose result is channels_last (it, and what the pool computes, only reach sites and
      // layout-following operations): the pool runs on it as it is and its result stays channels_last.
      const auto from = flow.any_layout_call_origins.find(pc);
      const bool from_channels_last_site =
          from != flow.any_layout_call_origins.end() && any_channels_last(from->second, channels_last);
      auto kernel = std::make_shared<MaxPoolLayoutKernel>(
          code.operators_[inst.X], static_cast<size_t>(given), from_channels_last_site);
      rebind_instruction(code, pc, [kernel](torch::jit::Stack& stack) { (*kernel)(stack); });
      taken.insert(pc);
      result->layouts_.push_back({LayoutCallSite{function_name, pc, "aten::max_pool2d", 0, 0}, std::move(kernel)});
    }
    for (size_t pc : average_pools) {
      const auto& inst = code.instructions_[pc];
      const int given = code.operator_input_sizes_[inst.X];
      const auto from = flow.checked_call_origins.find(pc);
      if (taken.count(pc) != 0 || given < 1 || from == flow.checked_call_origins.end() ||
          !any_channels_last(from->second, channels_last)) {
        continue; // no site makes its input channels_last
      }
      auto kernel = std::make_shared<AvgPoolLayoutKernel>(code.operators_[inst.X], static_cast<size_t>(given));
      rebind_instruction(code, pc, [kernel](torch::jit::Stack& stack) { (*kernel)(stack); });
      taken.insert(pc);
      result->layouts_.push_back(
          {LayoutCallSite{function_name, pc, "aten::adaptive_avg_pool2d", 0, 0}, std::move(kernel)});
    }
    fold_calls(code, function_name, schema_of, taken, result->folded_);
    for (size_t pc : elementwise) {
      const auto& inst = code.instructions_[pc];
      const int given = code.operator_input_sizes_[inst.X];
      const std::string op = op_display_name(code.op_names_[inst.X]);
      const BoxedKernel in_place = kernel_of(in_place_overload_of(op));
      if (taken.count(pc) != 0 || result->folds(function_name, pc) || given < 2 || in_place == nullptr) {
        continue;
      }
      auto kernel = std::make_shared<InPlaceElementwiseKernel>(
          op == "aten::mul.Tensor" ? ElementwiseOp::Mul : ElementwiseOp::Add, code.operators_[inst.X], in_place,
          static_cast<size_t>(given));
      rebind_instruction(code, pc, [kernel](torch::jit::Stack& stack) { (*kernel)(stack); });
      taken.insert(pc);
      result->in_place_.push_back({InPlaceCallSite{function_name, pc, op, 0, 0}, std::move(kernel)});
    }
    for (QuantizedWeightCall& call : choose_quantized_engines ? find_quantized_weight_calls(code)
                                                              : std::vector<QuantizedWeightCall>{}) {
      if (taken.count(call.instruction) == 0) {
        quantized_calls.push_back({&code, function_name, std::move(call)});
      }
    }
  }
  // Each packed-weights object packed once for the other engines (forward and _forward_impl call the same convs).
  std::map<const void*, size_t> object_index;
  std::vector<QuantizedWeightCall> objects;
  for (const QuantizedCallIn& in : quantized_calls) {
    if (object_index.emplace(in.call.packed.internalToPointer(), objects.size()).second) {
      objects.push_back(in.call);
    }
  }
  const std::vector<RepackedWeights> repacked = pack_for_other_engines(objects);
  const std::string loaded_engine = loaded_engine_name();
  for (const QuantizedCallIn& in : quantized_calls) {
    const RepackedWeights& others = repacked[object_index.at(in.call.packed.internalToPointer())];
    Specialization::QuantizedEngine entry;
    entry.report = {in.function, in.call.instruction, in.call.op, {loaded_engine}, {}, {}};
    if (others.packings.empty()) {
      entry.report.notes.push_back(others.why_none); // reported, left bound to its generated kernel
      result->quantized_.push_back(std::move(entry));
      continue;
    }
    torch::jit::mobile::Code& code = *in.code;
    entry.kernel = std::make_shared<QuantizedEngineKernel>(
        code.operators_[code.instructions_[in.call.instruction].X], in.call.packed, loaded_engine, others.packings);
    rebind_instruction(
        code, in.call.instruction, [kernel = entry.kernel](torch::jit::Stack& stack) { (*kernel)(stack); });
    result->quantized_.push_back(std::move(entry));
  }
  return result;
}

std::vector<QuantizedEngineCallSite> Specialization::quantized_engine_calls() const {
  std::vector<QuantizedEngineCallSite> reports;
  for (const QuantizedEngine& call : quantized_) {
    QuantizedEngineCallSite report = call.report;
    if (call.kernel) {
      report.engines = call.kernel->engines();
      report.calls = call.kernel->calls_per_engine();
      const std::vector<std::string> notes = call.kernel->notes();
      report.notes.insert(report.notes.end(), notes.begin(), notes.end());
    }
    reports.push_back(std::move(report));
  }
  return reports;
}

bool Specialization::chooses_engine(const std::string& function, size_t instruction) const {
  return std::any_of(quantized_.begin(), quantized_.end(), [&](const QuantizedEngine& call) {
    return call.kernel && call.report.function == function && call.report.instruction == instruction;
  });
}

std::vector<InPlaceCallSite> Specialization::in_place_calls() const {
  std::vector<InPlaceCallSite> reports;
  for (const InPlace& call : in_place_) {
    InPlaceCallSite report = call.report;
    report.in_place_calls = call.kernel->in_place_calls();
    report.allocating_calls = call.kernel->allocating_calls();
    reports.push_back(std::move(report));
  }
  return reports;
}

bool Specialization::writes_in_place(const std::string& function, size_t instruction) const {
  return std::any_of(in_place_.begin(), in_place_.end(), [&](const InPlace& call) {
    return call.report.instruction == instruction && call.report.function == function;
  });
}

std::vector<LayoutCallSite> Specialization::layout_calls() const {
  std::vector<LayoutCallSite> reports;
  for (const Layout& layout : layouts_) {
    LayoutCallSite report = layout.report;
    report.channels_last_calls = layout.kernel->channels_last_calls();
    report.stock_calls = layout.kernel->stock_calls();
    reports.push_back(std::move(report));
  }
  return reports;
}

bool Specialization::changes_layout(const std::string& function, size_t instruction) const {
  return std::any_of(layouts_.begin(), layouts_.end(), [&](const Layout& layout) {
    return layout.report.instruction == instruction && layout.report.function == function;
  });
}

std::vector<FoldedCallSite> Specialization::folded_calls() const {
  std::vector<FoldedCallSite> reports;
  for (const Folded& folded : folded_) {
    FoldedCallSite report = folded.report;
    report.computed = folded.kernel->computed();
    report.reused = folded.kernel->reused();
    reports.push_back(std::move(report));
  }
  return reports;
}

bool Specialization::folds(const std::string& function, size_t instruction) const {
  return std::any_of(folded_.begin(), folded_.end(), [&](const Folded& folded) {
    return folded.report.instruction == instruction && folded.report.function == function;
  });
}

c10::IValue Specialization::protect_folded(c10::IValue output) const {
  if (folded_.empty()) {
    return output;
  }
  return protect_from_handed_out(std::move(output));
}

void Specialization::forget_handed_out() const {
  if (!folded_.empty()) {
    lightweight_dispatch::forget_handed_out();
  }
}

std::vector<SpecializedCallSite> Specialization::sites() const {
  std::vector<SpecializedCallSite> reports;
  for (const Site& site : sites_) {
    SpecializedCallSite report = site.report;
    report.specialized_calls = site.kernel->specialized_calls();
    report.generated_calls = site.kernel->generated_calls();
    report.notes = site.kernel->notes();
    report.prepare_ms = site.kernel->prepare_ms();
    report.preparations = site.kernel->preparations();
    reports.push_back(std::move(report));
  }
  return reports;
}

const std::string* Specialization::runs(const std::string& function, size_t instruction) const {
  for (const Site& site : sites_) {
    const auto& covered = site.report.fused_instructions;
    if (site.report.function == function && std::find(covered.begin(), covered.end(), instruction) != covered.end()) {
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
  return map_tensors(std::move(output),
      [](const at::Tensor& t) { return is_channels_last_only(t) ? t.contiguous() : t; });
}

} // namespace lightweight_dispatch
