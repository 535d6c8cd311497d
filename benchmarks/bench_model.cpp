#include <benchmarks/bench_model.h>

#include <stdexcept>

namespace lightweight_dispatch::bench {

Mode parse_mode(const std::string& text) {
  if (text == "static") {
    return Mode::Static;
  }
  if (text == "static_plain") {
    return Mode::StaticPlain;
  }
  if (text == "static_stock") {
    return Mode::StaticStock;
  }
  if (text == "dynamic") {
    return Mode::Dynamic;
  }
  if (text == "static_auto") {
    return Mode::StaticAutoEngines;
  }
  throw std::runtime_error(
      "unknown mode '" + text + "' (expected static, static_plain, static_stock, dynamic or static_auto)");
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::Static:
      return "static";
    case Mode::StaticPlain:
      return "static_plain";
    case Mode::StaticStock:
      return "static_stock";
    case Mode::Dynamic:
      return "dynamic";
    case Mode::StaticAutoEngines:
      return "static_auto";
  }
  return "unknown";
}

std::unique_ptr<Model> load_model(const std::string& path, Mode mode) {
  LoadOptions options;
  options.dispatch = mode == Mode::Dynamic ? Dispatch::Dynamic : Dispatch::Static;
  const bool stage = mode == Mode::Static || mode == Mode::StaticAutoEngines;
  options.interpreter = stage || mode == Mode::StaticPlain ? Interpreter::Lightweight : Interpreter::Stock;
  options.specialize = stage;
  options.choose_quantized_engines = mode == Mode::StaticAutoEngines;
  try {
    return std::make_unique<Model>(Model::load(path, options));
  } catch (const Error& e) {
    throw std::runtime_error(e.what());
  }
}

c10::IValue run_once(const Model& model, const std::vector<c10::IValue>& inputs) {
  c10::IValue output = model.forward(inputs);
  model.wait_for_kernels(); // after a first call: timed runs are the compiled kernels' (one atomic load after)
  return output;
}

std::vector<c10::IValue> as_ivalues(const std::vector<at::Tensor>& tensors) {
  return std::vector<c10::IValue>(tensors.begin(), tensors.end());
}

} // namespace lightweight_dispatch::bench
