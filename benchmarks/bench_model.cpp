#include <benchmarks/bench_model.h>

#include <lite_predictor/kernel_table.h>
#include <lite_predictor/op_binding.h>

#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/parse_operators.h>

#include <stdexcept>

namespace lightweight_dispatch::bench {

Mode parse_mode(const std::string& text) {
  if (text == "static") {
    return Mode::Static;
  }
  if (text == "static_stock") {
    return Mode::StaticStock;
  }
  if (text == "dynamic") {
    return Mode::Dynamic;
  }
  throw std::runtime_error("unknown mode '" + text + "' (expected static, static_stock or dynamic)");
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::Static:
      return "static";
    case Mode::StaticStock:
      return "static_stock";
    case Mode::Dynamic:
      return "dynamic";
  }
  return "unknown";
}

std::unique_ptr<LoadedModel> load_model(const std::string& path, Mode mode) {
  // As lite_predictor: static mode skips the stock operator check, binding checks every op itself.
  const bool bind = mode != Mode::Dynamic;
  const uint64_t options = bind ? 0 : torch::jit::kDefaultMobileLoadOptions;
  if (mode == Mode::Dynamic) {
    // As lite_predictor: the stock interpreter resolves ops through the dispatcher, which must know the
    // project's own (torchvision::*) ops. Idempotent.
    register_custom_ops_with_dispatcher();
  }
  torch::jit::ExtraFilesMap extra_files;
  torch::jit::mobile::Module module = [&] {
    try {
      return torch::jit::_load_for_mobile(path, std::nullopt, extra_files, options);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      throw std::runtime_error(path + ": cannot load: " + what.substr(0, what.find('\n')));
    }
  }();
  if (bind) {
    // Built once per process; binding parses the schemas of the ops the model calls, as lite_predictor does.
    static const KernelIndex index(generated_kernels());
    try {
      bind_static(module, index);
    } catch (const BindingError& e) {
      throw std::runtime_error(path + ": " + e.what());
    }
  }
  auto model = std::make_unique<LoadedModel>(LoadedModel{std::move(module), nullptr});
  if (mode == Mode::Static) {
    try {
      model->interpreter = std::make_unique<BytecodeInterpreter>(model->module, "forward");
    } catch (const BytecodeError& e) {
      throw std::runtime_error(path + ": " + e.what());
    }
  }
  return model;
}

c10::IValue run_once(LoadedModel& model, const std::vector<c10::IValue>& inputs) {
  c10::InferenceMode inference_mode;
  return model.forward(inputs);
}

std::vector<c10::IValue> as_ivalues(const std::vector<at::Tensor>& tensors) {
  return std::vector<c10::IValue>(tensors.begin(), tensors.end());
}

} // namespace lightweight_dispatch::bench
