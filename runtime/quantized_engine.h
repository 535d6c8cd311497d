// The quantized engine: whose kernels quantized operators run (FBGEMM, QNNPACK, oneDNN, x86) and with
// which a quantized model's packed weights are rebuilt when it loads. Set it before loading a model.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace lightweight_dispatch {

class QuantizedEngineError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The engines this LibTorch was built with, by their Python names ("qnnpack", "onednn", "x86", "fbgemm").
std::vector<std::string> supported_quantized_engines();

// The engine in use, by name ("x86" by default on an x86 build of the wheel).
std::string current_quantized_engine();

// Throws QuantizedEngineError naming the supported engines if `name` is not one of them.
void set_quantized_engine(const std::string& name);

} // namespace lightweight_dispatch
