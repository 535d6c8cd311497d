#include <bind_time/quantized_engines.h>

#include <bind_time/preparation_run.h>
#include <bind_time/race.h>
#include <bind_time/test_hooks.h>
#include <runtime/op_binding.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/quantized/PackedParams.h>
#include <ATen/ops/_make_per_tensor_quantized_tensor.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/jit/runtime/instruction.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <typeinfo>

namespace lightweight_dispatch {

namespace {

bool is_conv(const std::string& op) {
  return op == "quantized::conv2d.new" || op == "quantized::conv2d_relu.new";
}

bool is_linear(const std::string& op) {
  return op == "quantized::linear" || op == "quantized::linear_relu";
}

// The dynamic type of a packed-weights object: which engine's kernels its apply runs.
std::string packing_kind(const c10::IValue& packed, bool conv) {
  if (conv) {
    const auto object = packed.toCustomClass<ConvPackedParamsBase<2>>();
    return typeid(*object).name();
  }
  const auto object = packed.toCustomClass<LinearPackedParamsBase>();
  return typeid(*object).name();
}

// Sets the process's quantized engine for the lifetime of the guard (the prepack operators read it).
class EngineGuard {
 public:
  explicit EngineGuard(c10::QEngine engine) : saved_(at::globalContext().qEngine()) {
    at::globalContext().setQEngine(engine);
  }
  ~EngineGuard() {
    at::globalContext().setQEngine(saved_);
  }
  EngineGuard(const EngineGuard&) = delete;
  EngineGuard& operator=(const EngineGuard&) = delete;

 private:
  c10::QEngine saved_;
};

std::string lower_case(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

// The prepack operator of `call`'s kind and its arguments: the weights as loaded, unpacked, with the conv's own
// parameters.
struct PrepackCall {
  const char* op;
  torch::jit::Stack arguments;
};

// With the test hook, a bias the checks must catch: every output channel moved by many quantization steps.
c10::IValue bias_argument(const std::optional<at::Tensor>& bias, const at::Tensor& weight) {
  if (!test_asks_for_wrong_weights()) {
    return bias ? c10::IValue(*bias) : c10::IValue();
  }
  const at::Tensor given = bias ? *bias : at::zeros({weight.size(0)}, at::TensorOptions().dtype(at::kFloat));
  return given.mul(3.0).add(1.0);
}

PrepackCall unpacked(const QuantizedWeightCall& call) {
  if (is_conv(call.op)) {
    const auto conv = call.packed.toCustomClass<ConvPackedParamsBase<2>>();
    auto [weight, bias] = conv->unpack();
    return {"quantized::conv2d_prepack", {weight, bias_argument(bias, weight), conv->stride().vec(),
                                             conv->padding().vec(), conv->dilation().vec(), conv->groups()}};
  }
  auto [weight, bias] = call.packed.toCustomClass<LinearPackedParamsBase>()->unpack();
  return {"quantized::linear_prepack", {weight, bias_argument(bias, weight)}};
}

// The weights packed by the prepack operator of the engine in force (through the dispatcher: only FBGEMM's prepack
// is exported).
c10::IValue repack(const PrepackCall& prepack) {
  torch::jit::Stack stack = prepack.arguments;
  c10::Dispatcher::singleton().findSchemaOrThrow(prepack.op, "").callBoxed(stack);
  return stack.back();
}

// The engine whose kernels a packed object of this (mangled) type runs: LibTorch's classes are PackedConvWeight,
// PackedConvWeightsQnnp and PackedConvWeightsOnednn (PackedLinearWeight... likewise); x86 packs as one of
// FBGEMM and oneDNN.
c10::QEngine kernels_of(const std::string& kind) {
  if (kind.find("Onednn") != std::string::npos) {
    return c10::QEngine::ONEDNN;
  }
  return kind.find("Qnnp") != std::string::npos ? c10::QEngine::QNNPACK : c10::QEngine::FBGEMM;
}

// An input's shape as a key: sizes, then strides.
std::vector<int64_t> shape_key(const at::Tensor& input) {
  std::vector<int64_t> key = input.sizes().vec();
  key.insert(key.end(), input.strides().begin(), input.strides().end());
  return key;
}

bool is_quantized_per_tensor(const c10::IValue& value) {
  return value.isTensor() && value.toTensor().is_quantized() &&
         value.toTensor().qscheme() == at::kPerTensorAffine && value.toTensor().scalar_type() == at::kQUInt8;
}

// Seeded uniform integers over the range `input` holds, as a quantized tensor of its sizes, strides, scale and zero
// point: an input's own values can hide a wrong packing (a post-ReLU map of zeros), and values beyond its range
// can overflow an int8 kernel's 16-bit pairs where the model's calibration kept them in range.
at::Tensor quantized_probe_like(const at::Tensor& input) {
  const at::Tensor codes = input.int_repr();
  const int64_t low = codes.min().item<int64_t>(), high = codes.max().item<int64_t>();
  at::Generator generator = at::detail::createCPUGenerator(0x5eed);
  at::Tensor values = at::randint(low, high + 1, input.sizes(), generator, at::TensorOptions().dtype(at::kByte));
  at::Tensor probe = at::_make_per_tensor_quantized_tensor(values, input.q_scale(), input.q_zero_point());
  return probe.contiguous(input.suggest_memory_format());
}

// Whether `got` has `expected`'s sizes, scale and zero point, and no element more than one step from it.
bool within_one_step(const at::Tensor& got, const at::Tensor& expected) {
  if (!got.is_quantized() || got.sizes() != expected.sizes() || got.scalar_type() != expected.scalar_type() ||
      got.qscheme() != at::kPerTensorAffine || got.q_scale() != expected.q_scale() ||
      got.q_zero_point() != expected.q_zero_point()) {
    return false;
  }
  const at::Tensor steps = got.int_repr().to(at::kInt).sub_(expected.int_repr().to(at::kInt)).abs_();
  return steps.numel() == 0 || steps.max().item<int64_t>() <= 1;
}

} // namespace

std::string loaded_engine_name() {
  return lower_case(c10::toString(at::globalContext().qEngine()));
}

std::vector<QuantizedWeightCall> find_quantized_weight_calls(const torch::jit::mobile::Code& code) {
  std::vector<QuantizedWeightCall> calls;
  for (size_t pc = 3; pc < code.instructions_.size(); ++pc) {
    const auto& inst = code.instructions_[pc];
    if (inst.op != torch::jit::OP) {
      continue;
    }
    const std::string op = op_display_name(code.op_names_[static_cast<size_t>(inst.X)]);
    if (!is_conv(op) && !is_linear(op)) {
      continue;
    }
    if (code.operator_input_sizes_[static_cast<size_t>(inst.X)] != 4) {
      continue;
    }
    const auto& push = code.instructions_[pc - 3];
    if (push.op != torch::jit::LOADC || code.instructions_[pc - 2].op != torch::jit::LOADC ||
        code.instructions_[pc - 1].op != torch::jit::LOADC) {
      continue;
    }
    const c10::IValue& packed = code.constants_[static_cast<size_t>(push.X)];
    const bool conv = is_conv(op);
    if (!packed.isObject() ||
        (conv ? !packed.type()->isSubtypeOf(*c10::getCustomClassType<c10::intrusive_ptr<ConvPackedParamsBase<2>>>())
              : !packed.type()->isSubtypeOf(*c10::getCustomClassType<c10::intrusive_ptr<LinearPackedParamsBase>>()))) {
      continue;
    }
    calls.push_back({pc, op, packed});
  }
  return calls;
}

namespace {

// The engines other than the loaded one whose packings are worth their load time.
std::vector<c10::QEngine> other_engines() {
  std::vector<c10::QEngine> engines;
  for (const c10::QEngine engine : at::globalContext().supportedQEngines()) {
    if (engine != c10::QEngine::NoQEngine && engine != at::globalContext().qEngine()) {
      engines.push_back(engine);
    }
  }
#if defined(__x86_64__) || defined(_M_X64)
  // ARM's engine runs portable SSE2 kernels here (measured on MobileNetV2's convs: twice FBGEMM's time or more),
  // and packing for it would only add to the load.
  engines.erase(std::remove(engines.begin(), engines.end(), c10::QEngine::QNNPACK), engines.end());
#endif
  return engines;
}

} // namespace

std::vector<RepackedWeights> pack_for_other_engines(const std::vector<QuantizedWeightCall>& calls) {
  std::vector<RepackedWeights> repacked(calls.size());
  std::vector<std::optional<PrepackCall>> prepacks(calls.size());
  std::vector<std::vector<std::string>> kinds(calls.size()); // per call: the kinds of packing it has
  std::vector<std::string> failures(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const bool conv = is_conv(calls[i].op);
    if (conv && calls[i].packed.toCustomClass<ConvPackedParamsBase<2>>()->transpose()) {
      repacked[i].why_none = "a transposed conv: packed for its loaded engine only";
      continue;
    }
    kinds[i].push_back(packing_kind(calls[i].packed, conv));
  }
  for (const c10::QEngine engine : other_engines()) {
    const std::string name = lower_case(c10::toString(engine));
    const EngineGuard guard(engine); // the prepack operators read it
    for (size_t i = 0; i < calls.size(); ++i) {
      // An engine whose prepack makes the loaded kind of object again is not worth its load time.
      if (kinds[i].empty() || kernels_of(kinds[i].front()) == engine) {
        continue;
      }
      try {
        if (!prepacks[i]) {
          prepacks[i] = unpacked(calls[i]);
        }
        c10::IValue packed = repack(*prepacks[i]);
        const std::string kind = packing_kind(packed, is_conv(calls[i].op));
        if (std::find(kinds[i].begin(), kinds[i].end(), kind) == kinds[i].end()) {
          kinds[i].push_back(kind);
          repacked[i].packings.push_back({name, std::move(packed)});
        }
      } catch (const std::exception& e) {
        const std::string what = e.what();
        failures[i] += (failures[i].empty() ? "" : "; ") + name + ": " + what.substr(0, what.find('\n'));
      }
    }
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    if (repacked[i].packings.empty() && repacked[i].why_none.empty()) {
      repacked[i].why_none = failures[i].empty() ? "no other engine packs its weights another way"
                                                 : "no engine repacks it (" + failures[i] + ")";
    }
  }
  return repacked;
}

QuantizedEngineKernel::QuantizedEngineKernel(std::function<void(torch::jit::Stack&)> generated, c10::IValue loaded,
    std::string loaded_engine, std::vector<EnginePacking> others)
    : generated_(std::move(generated)), loaded_(std::move(loaded)), loaded_engine_(std::move(loaded_engine)),
      others_(std::move(others)), calls_(new std::atomic<int64_t>[others_.size() + 1]) {
  for (size_t i = 0; i <= others_.size(); ++i) {
    calls_[i] = 0;
  }
}

void QuantizedEngineKernel::operator()(torch::jit::Stack& stack) const {
  const size_t start = stack.size() - kArguments;
  // Only the loaded constant is known to have other packings: anything else (never expected) runs as given.
  if (!is_quantized_per_tensor(stack[start]) || !stack[start + 1].isObject() ||
      stack[start + 1].internalToPointer() != loaded_.internalToPointer() || !compiled_kernels_allowed()) {
    count(kLoaded);
    generated_(stack);
    return;
  }
  const at::Tensor& input = stack[start].toTensor();
  std::optional<int> which = decided(input);
  if (!which && in_comparison_run()) {
    which = kLoaded; // a model check's run decides nothing
  }
  if (!which) {
    note_stage_decision();
    if (preparation_run_follows() && !in_preparation_run() && defer_once(input)) {
      note_unprepared_shape(); // decided by the preparation run, on a copy of this call's inputs
      which = kLoaded;
    } else {
      which = decide(torch::jit::Stack(stack.begin() + static_cast<std::ptrdiff_t>(start), stack.end()));
    }
  }
  count(*which);
  if (*which != kLoaded) {
    note_compiled_call(); // what the model check compares with runs on the loaded packings
    stack[start + 1] = others_[static_cast<size_t>(*which)].packed;
  }
  generated_(stack);
}

void QuantizedEngineKernel::count(int which) const {
  if (in_callers_run()) {
    calls_[static_cast<size_t>(which + 1)].fetch_add(1, std::memory_order_relaxed);
  }
}

std::optional<int> QuantizedEngineKernel::decided(const at::Tensor& input) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = choice_for_.find(shape_key(input));
  return found == choice_for_.end() ? std::nullopt : std::optional<int>(found->second);
}

bool QuantizedEngineKernel::defer_once(const at::Tensor& input) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return deferred_.insert(shape_key(input)).second;
}

void QuantizedEngineKernel::run_with(torch::jit::Stack& arguments, int which) const {
  if (which != kLoaded) {
    arguments[1] = others_[static_cast<size_t>(which)].packed;
  }
  generated_(arguments);
}

int QuantizedEngineKernel::decide(const torch::jit::Stack& arguments) const {
  const at::Tensor input = arguments[0].toTensor();
  const std::vector<int64_t> key = shape_key(input);
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto found = choice_for_.find(key); found != choice_for_.end()) {
    return found->second;
  }
  const auto result_of = [&](int which, const at::Tensor& x) {
    torch::jit::Stack frame = arguments;
    frame[0] = x;
    run_with(frame, which);
    return frame.back().toTensor();
  };
  const at::Tensor probe = quantized_probe_like(input);
  const at::Tensor expected = result_of(kLoaded, input), expected_on_probe = result_of(kLoaded, probe);
  std::vector<int> candidates{kLoaded};
  for (size_t i = 0; i < others_.size(); ++i) {
    const int which = static_cast<int>(i);
    if (within_one_step(result_of(which, input), expected) && within_one_step(result_of(which, probe), expected_on_probe)) {
      candidates.push_back(which);
    } else {
      notes_.push_back(others_[i].engine + " left out for input " + c10::str(input.sizes()) +
                       ": its result is more than one quantization step from " + loaded_engine_ + "'s");
    }
  }
  int chosen = kLoaded;
  if (candidates.size() > 1 && test_asks_for_no_race()) {
    chosen = candidates[1]; // the first other engine that agrees (test_hooks.h)
  } else if (candidates.size() > 1) {
    // Each in turn, best run kept, up to the race's rounds; the loaded packing keeps the call unless another's
    // best beats its best by the winning margin.
    std::vector<double> best(candidates.size(), INFINITY);
    for (int round = 0; round < kRaceRounds; ++round) {
      for (size_t c = 0; c < candidates.size(); ++c) {
        torch::jit::Stack frame = arguments;
        best[c] = std::min(best[c], ms_of([&] { run_with(frame, candidates[c]); }));
      }
      const auto [fastest, slowest] = std::minmax_element(best.begin(), best.end());
      if (round > 0 && *slowest > kClearlyAhead * *fastest && candidates.size() == 2) {
        break;
      }
    }
    const size_t fastest = static_cast<size_t>(std::min_element(best.begin(), best.end()) - best.begin());
    if (fastest != 0 && best[fastest] * kWinningMargin < best[0] && !test_asks_generated_kernels_to_win()) {
      chosen = candidates[fastest];
    }
  }
  choice_for_.emplace(key, chosen);
  return chosen;
}

std::vector<std::string> QuantizedEngineKernel::engines() const {
  std::vector<std::string> names{loaded_engine_};
  for (const EnginePacking& other : others_) {
    names.push_back(other.engine);
  }
  return names;
}

std::vector<int64_t> QuantizedEngineKernel::calls_per_engine() const {
  std::vector<int64_t> calls;
  for (size_t i = 0; i <= others_.size(); ++i) {
    calls.push_back(calls_[i].load(std::memory_order_relaxed));
  }
  return calls;
}

std::vector<std::string> QuantizedEngineKernel::notes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return notes_;
}

} // namespace lightweight_dispatch
