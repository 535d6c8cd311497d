// Quantized convs and linears on the engine that runs each one fastest (LoadOptions::choose_quantized_engines;
// lite_predictor --qengine auto). A quantized model's packed weights are built at load for the engine in force
// (x86 on x86-64); LibTorch has other engines whose kernels for the same weights are faster on some shapes and
// slower on others (on an AVX2 machine without VNNI, oneDNN's int8 convolutions beat FBGEMM's on most of
// MobileNetV2's layers, while its quantized linear takes 3x as long).
//
// At bind time every quantized::conv2d / conv2d_relu / linear / linear_relu call whose packed weights are a
// constant pushed right before its scale and zero point is re-bound to a kernel that holds those weights packed
// again under each other engine (unpacked, and packed by the engine's own prepack operator, which LibTorch only
// reaches through the dispatcher: a load-time call, never one per inference). For each input shape, on its first
// call (or in the background preparation run), it runs every packing on that call's input and on a probe of the
// same value range and keeps only those whose results have the same scale and zero point and differ from the
// loaded packing's by at most one quantization step in every element; then times them, and the call site runs the
// fastest from then on (the loaded one unless another beats it by the stage's winning margin). The generated
// kernel runs every call: only the packed-weights argument it is given changes.
//
// Engines round differently, so results may move by a quantization step at each such call: the choice is opt-in,
// never part of the default stage, which does not change an answer.
#pragma once

#include <lightweight_dispatch/bind_time_report.h>

#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <torch/csrc/jit/mobile/code.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// The same weights packed for another engine.
struct EnginePacking {
  std::string engine;  // "onednn"
  c10::IValue packed;  // a ConvPackedParamsBase<2> or LinearPackedParamsBase object
};

// A quantized conv or linear call whose packed weights are a constant.
struct QuantizedWeightCall {
  size_t instruction = 0; // its OP instruction
  std::string op;         // "quantized::conv2d_relu.new"
  c10::IValue packed;     // the constant it is given, as loaded
};

// The quantized::conv2d(.new), conv2d_relu(.new), linear and linear_relu calls of `code` that are given their
// packed weights, scale and zero point by the three LOADC instructions right before them.
std::vector<QuantizedWeightCall> find_quantized_weight_calls(const torch::jit::mobile::Code& code);

// The process's quantized engine now, as lite_predictor names it ("x86"): the one a model's weights were packed
// for while it loaded.
std::string loaded_engine_name();

// A call's weights packed again for the other engines, or why not.
struct RepackedWeights {
  std::vector<EnginePacking> packings;
  std::string why_none; // "" where there are packings (a transposed conv, weights no engine repacks)
};

// Each call's weights packed again under every engine this LibTorch has whose kind of packed object differs from
// the loaded one's (on x86-64 without VNNI, x86 packs as FBGEMM does: fbgemm adds nothing), but ARM's qnnpack on
// x86-64; the process's quantized engine switched to each engine in turn, then restored. (Packing on two threads
// took as long: 105 ms against 112 for MobileNetV2's 52 convs.)
std::vector<RepackedWeights> pack_for_other_engines(const std::vector<QuantizedWeightCall>& calls);

class QuantizedEngineKernel {
 public:
  // `generated`: the call's generated kernel; `loaded_engine`: the engine its constant was packed under.
  QuantizedEngineKernel(std::function<void(torch::jit::Stack&)> generated, c10::IValue loaded,
      std::string loaded_engine, std::vector<EnginePacking> others);

  void operator()(torch::jit::Stack& stack) const;

  // The engines, the loaded one first, and the caller's calls each served so far.
  std::vector<std::string> engines() const;
  std::vector<int64_t> calls_per_engine() const;
  std::vector<std::string> notes() const;

 private:
  static constexpr size_t kArguments = 4; // input, packed weights, output scale, output zero point
  static constexpr int kLoaded = -1;

  // Which packing this input's shape runs (kLoaded, or an index into others_), if decided.
  std::optional<int> decided(const at::Tensor& input) const;
  // True the first time a shape is met undecided: the preparation run that follows decides it.
  bool defer_once(const at::Tensor& input) const;
  // Checks and times every packing on these arguments (a copy of the call's frame) and records the choice.
  int decide(const torch::jit::Stack& arguments) const;
  // Runs the generated kernel on `arguments` with packing `which`, leaving the result on `arguments`.
  void run_with(torch::jit::Stack& arguments, int which) const;
  void count(int which) const;

  std::function<void(torch::jit::Stack&)> generated_;
  c10::IValue loaded_;
  std::string loaded_engine_;
  std::vector<EnginePacking> others_;
  mutable std::unique_ptr<std::atomic<int64_t>[]> calls_; // per engine, the loaded one first
  mutable std::mutex mutex_;
  mutable std::map<std::vector<int64_t>, int> choice_for_; // per input sizes and strides
  mutable std::set<std::vector<int64_t>> deferred_;
  mutable std::vector<std::string> notes_;
};

} // namespace lightweight_dispatch
