#include <runtime/quantized_engine.h>

#include <ATen/Context.h>

#include <algorithm>
#include <cctype>

namespace lightweight_dispatch {

namespace {

// c10's names are upper case ("QNNPACK"); Python's torch.backends.quantized.engine uses lower case.
std::string engine_name(c10::QEngine engine) {
  std::string name = c10::toString(engine);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

} // namespace

std::vector<std::string> supported_quantized_engines() {
  std::vector<std::string> names;
  for (const c10::QEngine engine : at::globalContext().supportedQEngines()) {
    if (engine != c10::QEngine::NoQEngine) {
      names.push_back(engine_name(engine));
    }
  }
  return names;
}

std::string current_quantized_engine() {
  return engine_name(at::globalContext().qEngine());
}

void set_quantized_engine(const std::string& name) {
  for (const c10::QEngine engine : at::globalContext().supportedQEngines()) {
    if (engine != c10::QEngine::NoQEngine && engine_name(engine) == name) {
      at::globalContext().setQEngine(engine);
      return;
    }
  }
  std::string supported;
  for (const std::string& engine : supported_quantized_engines()) {
    supported += (supported.empty() ? "" : ", ") + engine;
  }
  throw QuantizedEngineError(
      "--qengine '" + name + "' is not a quantized engine this LibTorch was built with; choose one of: " + supported);
}

} // namespace lightweight_dispatch
