// Loading a lite-interpreter model the way lite_predictor does, for the benchmark programs.
#pragma once

#include <lightweight_dispatch/runtime.h>

#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <vector>

namespace lightweight_dispatch::bench {

// "static": the stock loader without its operator check, every call site re-bound to its generated
// kernel, run by lite_predictor's own interpreter loop (lite_predictor's default).
// "static_stock": the same bound module run by LibTorch's stock interpreter loop (--interpreter stock),
// which separates what the loop costs from what the kernel call costs.
// "dynamic": the stock loader and interpreter, operators through the dispatcher.
// "floor" is not a module: see kernel_floor.h.
// Static: what lite_predictor runs (generated kernels, the bind-time stage, its own loop); StaticPlain: the same
// without the bind-time stage (--no-specialize); StaticStock: generated kernels in LibTorch's loop, no stage;
// Dynamic: the stock interpreter and dispatcher; StaticAutoEngines: Static with each quantized conv and linear on the
// engine fastest for it (lite_predictor --qengine auto), whose outputs may differ from the others' by a few steps.
enum class Mode { Static, StaticPlain, StaticStock, Dynamic, StaticAutoEngines };

Mode parse_mode(const std::string& text);
const char* mode_name(Mode mode);

// Loaded (and for the static modes, bound) through the runtime's API, as lite_predictor loads it; throws std::runtime_error naming the
// file and the reason.
std::unique_ptr<Model> load_model(const std::string& path, Mode mode);

// One inference, as lite_predictor runs it: under InferenceMode, inputs copied onto a fresh stack; after a call
// that started background preparation, it waits for the kernels (the timed runs are theirs).
c10::IValue run_once(const Model& model, const std::vector<c10::IValue>& inputs);

std::vector<c10::IValue> as_ivalues(const std::vector<at::Tensor>& tensors);

} // namespace lightweight_dispatch::bench
