// Loading a lite-interpreter model the way lite_predictor does, for the benchmark programs.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/mobile/module.h>

#include <string>
#include <vector>

namespace lightweight_dispatch::bench {

// "static": the stock loader without its operator check, then every call site re-bound to its
// generated kernel (lite_predictor --dispatch static). "dynamic": the stock loader and interpreter.
// "floor" is not a module: see kernel_floor.h.
enum class Mode { Static, Dynamic };

Mode parse_mode(const std::string& text);
const char* mode_name(Mode mode);

// Loads and, for Mode::Static, binds. Throws std::runtime_error naming the file and the reason.
torch::jit::mobile::Module load_module(const std::string& path, Mode mode);

// One inference, as lite_predictor runs it: under InferenceMode, inputs copied onto a fresh stack.
c10::IValue run_once(torch::jit::mobile::Module& module, const std::vector<c10::IValue>& inputs);

std::vector<c10::IValue> as_ivalues(const std::vector<at::Tensor>& tensors);

} // namespace lightweight_dispatch::bench
