// The public API (include/lightweight_dispatch/runtime.h) over the runtime's stages: file checks, LibTorch's
// loader, tensor checks, static binding, the bytecode check and interpreter. lite_predictor and the
// benchmarks use it too, so every message here is the one lite_predictor prints.
#include <lightweight_dispatch/runtime.h>

#include <bind_time/stage.h>
#include <runtime/allocator_settings.h>
#include <runtime/bytecode_interpreter.h>
#include <runtime/heap_prefault.h>
#include <runtime/huge_page_heap.h>
#include <runtime/load_helper.h>
#include <runtime/model_file_check.h>
#include <runtime/model_integrity.h>
#include <runtime/op_binding.h>
#include <runtime/quantized_engine.h>

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/mobile/code.h>
#include <torch/csrc/jit/mobile/function.h>
#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/module.h>
#include <torch/csrc/jit/mobile/parse_operators.h>
#include <torch/csrc/jit/runtime/instruction.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace lightweight_dispatch {

namespace {

using Clock = std::chrono::steady_clock;

// Whether a load in this process asked for the heap on huge pages (huge_pages() reports it).
std::atomic<bool>& huge_pages_asked() {
  static std::atomic<bool> asked{false};
  return asked;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// `debug_records`: DebugRecords::Skipped for the lightweight interpreter, which never reads them. `file`: the
// checked file, which the loader reads from its mapping; the caller hands it to the LoadHelper to unmap.
torch::jit::mobile::Module load_module(const std::string& path, Dispatch dispatch, DebugRecords debug_records,
    LoadTimings& timings, CheckedModelFile& file) {
  auto start = Clock::now();
  try {
    file = check_model_file(path, debug_records);
  } catch (const ModelFileError& e) {
    throw ModelLoadError(printable_first_line(e.what()));
  }
  timings.file_check_ms = ms_since(start);
  start = Clock::now();
  // Static dispatch loads without the stock operator check: binding checks every op itself and names all
  // the missing ones at once, including ops only this build provides.
  const uint64_t options = dispatch == Dispatch::Static ? 0 : torch::jit::kDefaultMobileLoadOptions;
  try {
    torch::jit::ExtraFilesMap extra_files;
    // The operators the loader runs (a quantized module's __setstate__ packing its weights: thousands of
    // select / item calls) dispatch below autograd, as every run does under inference mode; the tensors they
    // make are plain tensors, not inference ones.
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const std::unique_ptr<std::istream> archive = file.open();
    auto module = archive ? torch::jit::_load_for_mobile(*archive, std::nullopt, extra_files, options)
                          : torch::jit::_load_for_mobile(path, std::nullopt, extra_files, options);
    check_loaded_tensors(module);
    timings.libtorch_load_ms = ms_since(start);
    return module;
  } catch (const ModelIntegrityError& e) {
    throw ModelLoadError(path + ": " + e.what());
  } catch (const std::exception& e) {
    throw ModelLoadError(path + ": cannot load as a lite-interpreter model: " + printable_first_line(e.what()));
  }
}

std::vector<OperatorUse> as_operator_uses(const BindingReport& report) {
  std::vector<OperatorUse> uses;
  for (const OpUse& op : report.ops) {
    uses.push_back({op.name, op_path_name(op.path), op.reason});
  }
  return uses;
}

RunError failed_while_running(const std::exception& e) {
  return RunError(
      "the model failed while running (check the inputs' count, shapes and dtypes): " + printable_first_line(e.what()));
}

// The lightweight interpreter runs bytecode without per-instruction checks, so a call with the wrong number
// of arguments would read past the stack: refuse it first (when the bytecode carries the method's schema).
void check_argument_count(const torch::jit::mobile::Method& method, const std::vector<c10::IValue>& inputs) {
  const auto& function = method.function();
  if (!function.hasSchema()) {
    return;
  }
  const size_t expected = function.getSchema().arguments().size() - 1; // after self
  if (inputs.size() != expected) {
    throw InputError(
        "the model's " + method.name() + " takes " + std::to_string(expected) + " argument(s) after self, got " +
        std::to_string(inputs.size()) + " (load_inputs completes an inputs file with the defaults): " +
        forward_signature(function.getSchema()));
  }
}

// An operator's schema: its generated kernel's, or the JIT registry's for the operators the interpreter
// implements itself.
std::optional<c10::FunctionSchema> operator_schema(const std::string& op, const KernelIndex& index) {
  if (const GeneratedKernel* kernel = index.find(op)) {
    return parse_kernel_schema(*kernel);
  }
  const auto dot = op.find('.');
  const c10::OperatorName name(op.substr(0, dot), dot == std::string::npos ? "" : op.substr(dot + 1));
  if (const auto found = torch::jit::findOperatorFor(name)) {
    return found->schema();
  }
  return std::nullopt;
}

// The file's size in bytes, or 0 if it cannot be read (the file check then says why).
size_t file_size(const std::string& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  return error ? 0 : static_cast<size_t>(size);
}

Interpreter interpreter_of(const LoadOptions& options) {
  return options.interpreter.value_or(options.dispatch == Dispatch::Static ? Interpreter::Lightweight : Interpreter::Stock);
}

} // namespace

namespace {

// For a caller asking for a method the model does not have: that a submodule's class has one by that name (a
// quantized conv's __setstate__), which only the model's own methods may call; "" if none has.
std::string submodules_method_note(const torch::jit::mobile::Module& module, const std::string& method) {
  for (const auto& function : module.compilation_unit().methods()) {
    if (function->name() == method) {
      return " (" + function->qualname().qualifiedName() +
             " is a submodule's: it runs only where the model's own methods call it)";
    }
  }
  return "";
}

bool has_instruction(const torch::jit::mobile::Function& function, torch::jit::OpCode op) {
  for (const auto& inst : function.get_code().instructions_) {
    if (inst.op == op) {
      return true;
    }
  }
  return false;
}

// Whether a caller's run may assign an attribute: a function it reaches has SET_ATTR, or calls a method found by
// name at run time (INTERFACE_CALL) while some function of the model has SET_ATTR. A submodule's __setstate__,
// which only the loader runs, does not count.
bool assigns_attributes(const torch::jit::mobile::Module& module) {
  bool calls_by_name = false;
  for (const torch::jit::mobile::Function* function : functions_callers_reach(module)) {
    if (has_instruction(*function, torch::jit::SET_ATTR)) {
      return true;
    }
    calls_by_name = calls_by_name || has_instruction(*function, torch::jit::INTERFACE_CALL);
  }
  if (calls_by_name) {
    for (const torch::jit::mobile::Function* function : functions_to_run(module)) {
      if (has_instruction(*function, torch::jit::SET_ATTR)) {
        return true;
      }
    }
  }
  return false;
}

} // namespace

struct Model::Impl {
  // Constructed from the caller's options: a default LoadOptions here would call KernelLibrary::linked() in
  // the library and tie it to one generated kernel library.
  Impl(std::string model_path, LoadOptions load_options)
      : path(std::move(model_path)), options(std::move(load_options)) {}
  ~Impl() {
    finish_load_helper();
    stage.reset(); // its background preparation run uses everything below
  }

  void finish_load_helper() const {
    std::call_once(load_helper_finished, [this] {
      if (load_helper) {
        heap_prefaulted_bytes.store(load_helper->finish());
      }
    });
  }

  std::string path;
  LoadOptions options;
  LoadTimings timings;
  torch::jit::mobile::Module module;
  std::vector<OperatorUse> operators;
  std::unique_ptr<Stage> stage; // static dispatch with LoadOptions::specialize
  // Lightweight interpreter: one per method, prepared (bytecode checked) on first use under the mutex;
  // forward's at load. Read-only once prepared, so runs need no lock.
  mutable std::mutex interpreters_mutex;
  mutable std::map<std::string, std::unique_ptr<BytecodeInterpreter>> interpreters;
  const BytecodeInterpreter* forward_interpreter = nullptr; // prepared at load: runs take no lock
  std::optional<torch::jit::mobile::Method> forward_method;
  bool writes_attributes = false; // some SET_ATTR in the bytecode: runs take attribute_writes_mutex
  mutable std::mutex attribute_writes_mutex;
  // The load's helper thread (runtime/load_helper.h), left faulting in the heap until the first caller's run
  // starts: faulting in beside a run made the run slower, at one intra-op thread too (ShuffleNetV2 frozen's first
  // run 44.7 -> 26.6 ms with the helper finished as it starts).
  std::unique_ptr<LoadHelper> load_helper;
  mutable std::once_flag load_helper_finished;
  mutable std::atomic<size_t> heap_prefaulted_bytes{0};

  // `method` on `inputs`, checked already, under inference mode, through the interpreter the options chose.
  c10::IValue run(const std::string& method, std::vector<c10::IValue> inputs) const {
    if (options.keep_large_allocations_in_heap && options.heap_on_huge_pages) {
      advise_this_threads_heap(); // a background preparation run's (oneDNN's reordered weights), or the caller's
    }
    if (method == "forward" && forward_interpreter != nullptr) {
      return forward_interpreter->run(std::move(inputs));
    }
    if (interpreter_of(options) == Interpreter::Lightweight) {
      return interpreter_for(method).run(std::move(inputs));
    }
    torch::jit::mobile::Function* function = find_model_method(module, method);
    if (function == nullptr) {
      throw BytecodeError("the model has no method '" + method + "'");
    }
    return torch::jit::mobile::Method(&module, function)(std::move(inputs));
  }

  // A run of `method` by the caller: through the bind-time stage, when there is one. One at a time for a model
  // that writes its attributes: an object's slots are not safe to assign from several threads at once.
  c10::IValue run_for_caller(const std::string& method, std::vector<c10::IValue> inputs) const {
    finish_load_helper();
    std::unique_lock<std::mutex> one_at_a_time(attribute_writes_mutex, std::defer_lock);
    if (writes_attributes) {
      one_at_a_time.lock();
    }
    return stage ? stage->serve(method, std::move(inputs)) : run(method, std::move(inputs));
  }

  const BytecodeInterpreter& interpreter_for(const std::string& method) const {
    std::lock_guard<std::mutex> lock(interpreters_mutex);
    auto found = interpreters.find(method);
    if (found == interpreters.end()) {
      found = interpreters.emplace(method, std::make_unique<BytecodeInterpreter>(module, method)).first;
    }
    return *found->second;
  }
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load(const std::string& path, const LoadOptions& options) {
  if (options.keep_large_allocations_in_heap) {
    lightweight_dispatch::keep_large_allocations_in_heap();
    if (options.heap_on_huge_pages) {
      huge_pages_asked().store(true); // advised by the threads that run it (Impl::run)
    }
  }
  if (options.quantized_engine) {
    try {
      set_quantized_engine(*options.quantized_engine);
    } catch (const QuantizedEngineError& e) {
      throw OptionError(e.what());
    }
  }
  if (options.dispatch == Dispatch::Dynamic && options.kernels.register_with_dispatcher) {
    // The stock interpreter resolves operators through the dispatcher, which must know the project's own.
    options.kernels.register_with_dispatcher();
  }
  auto impl = std::make_unique<Impl>(path, options);
  impl->load_helper = std::make_unique<LoadHelper>(
      options.keep_large_allocations_in_heap && options.prefault_heap && allocates_from_main_heap()
          ? heap_prefault_budget(file_size(path))
          : 0);
  CheckedModelFile checked_file; // handed to the helper to unmap
  impl->module = load_module(path, options.dispatch,
      interpreter_of(options) == Interpreter::Lightweight ? DebugRecords::Skipped : DebugRecords::Read, impl->timings,
      checked_file);
  impl->load_helper->release(std::move(checked_file));
  impl->writes_attributes = assigns_attributes(impl->module);
  auto start = Clock::now();
  if (options.dispatch == Dispatch::Static) {
    const KernelIndex index(options.kernels.kernels);
    try {
      impl->operators = as_operator_uses(bind_static(impl->module, index));
    } catch (const BindingError& e) {
      throw MissingOperatorsError(path + ": " + e.what(), e.ops());
    }
    impl->timings.bind_ms = ms_since(start);
    start = Clock::now();
    if (options.specialize) {
      std::unordered_map<std::string, std::optional<c10::FunctionSchema>> schemas; // one parse per operator
      const OperatorSchema schema_of = [&](const std::string& op) -> const c10::FunctionSchema* {
        auto found = schemas.find(op);
        if (found == schemas.end()) {
          found = schemas.emplace(op, operator_schema(op, index)).first;
        }
        return found->second ? &*found->second : nullptr;
      };
      const GeneratedKernelOf kernel_of = [&index](const std::string& op) -> BoxedKernel {
        const GeneratedKernel* kernel = index.find(op);
        return kernel != nullptr && kernel->dispatcher_reason == nullptr ? kernel->unboxed : nullptr;
      };
      impl->stage = Stage::offer(impl->module, schema_of, kernel_of, options.preparation, options.model_check,
          options.choose_quantized_engines,
          [model = impl.get()](const std::string& method, std::vector<c10::IValue> inputs) {
            return model->run(method, std::move(inputs));
          });
    }
    impl->timings.specialize_ms = ms_since(start);
  } else {
    impl->operators = as_operator_uses(describe_dynamic(impl->module));
    impl->timings.bind_ms = ms_since(start);
  }
  start = Clock::now();
  if (interpreter_of(options) == Interpreter::Lightweight && find_model_method(impl->module, "forward")) {
    try {
      impl->forward_interpreter = &impl->interpreter_for("forward");
      impl->forward_method.emplace(&impl->module, find_model_method(impl->module, "forward"));
    } catch (const BytecodeError& e) {
      throw ModelLoadError(path + ": " + printable_first_line(e.what()));
    }
  }
  impl->timings.prepare_ms = ms_since(start);
  return Model(std::move(impl));
}

c10::IValue Model::forward(std::vector<c10::IValue> inputs) const {
  if (impl_->forward_interpreter != nullptr) {
    check_argument_count(*impl_->forward_method, inputs);
    c10::InferenceMode inference_mode;
    try {
      return impl_->run_for_caller("forward", std::move(inputs));
    } catch (const std::exception& e) {
      throw failed_while_running(e);
    }
  }
  return run_method("forward", std::move(inputs));
}

c10::IValue Model::run_method(const std::string& method, std::vector<c10::IValue> inputs) const {
  torch::jit::mobile::Function* function = find_model_method(impl_->module, method);
  if (function == nullptr) {
    throw RunError(impl_->path + ": the model has no method '" + method + "'" + submodules_method_note(impl_->module, method));
  }
  check_argument_count(torch::jit::mobile::Method(&impl_->module, function), inputs);
  // Inference, as a deployed model runs and as reference outputs are computed (under no_grad): grad mode
  // also picks other paths in some ops (transformer layers' fused inference).
  c10::InferenceMode inference_mode;
  try {
    return impl_->run_for_caller(method, std::move(inputs));
  } catch (const BytecodeError& e) {
    throw ModelLoadError(impl_->path + ": " + printable_first_line(e.what()));
  } catch (const std::exception& e) {
    throw failed_while_running(e);
  }
}

std::vector<std::string> Model::method_names() const {
  std::vector<std::string> names;
  for (const torch::jit::mobile::Function* method : model_methods(impl_->module)) {
    names.push_back(method->name());
  }
  return names;
}

const c10::FunctionSchema* Model::method_schema(const std::string& method) const {
  const torch::jit::mobile::Function* function = find_model_method(impl_->module, method);
  if (function == nullptr || !function->hasSchema()) {
    return nullptr;
  }
  return &function->getSchema();
}

const std::vector<OperatorUse>& Model::operators() const {
  return impl_->operators;
}

std::vector<CallSite> Model::call_sites() const {
  std::map<std::string, const OperatorUse*> by_name;
  for (const OperatorUse& op : impl_->operators) {
    by_name.emplace(op.name, &op);
  }
  std::vector<CallSite> sites;
  for (const torch::jit::mobile::Function* function : functions_to_run(impl_->module)) {
    const auto& code = function->get_code();
    const std::string function_name = function->qualname().qualifiedName();
    for (size_t pc = 0; pc < code.instructions_.size(); ++pc) {
      const auto& inst = code.instructions_[pc];
      if (inst.op != torch::jit::OP && inst.op != torch::jit::OPN) {
        continue;
      }
      const auto found = by_name.find(op_display_name(code.op_names_[inst.X]));
      if (found == by_name.end()) {
        continue;
      }
      const std::string& bound = found->second->path;
      const std::optional<std::string> rewritten = impl_->stage ? impl_->stage->runs(function_name, pc, bound) : std::nullopt;
      sites.push_back({function_name, pc, *found->second, rewritten.value_or(bound)});
    }
  }
  return sites;
}

std::vector<SpecializedCallSite> Model::specialized_sites() const {
  return impl_->stage ? impl_->stage->sites() : std::vector<SpecializedCallSite>{};
}

std::vector<FoldedCallSite> Model::folded_calls() const {
  return impl_->stage ? impl_->stage->folded_calls() : std::vector<FoldedCallSite>{};
}

void Model::wait_for_kernels() const {
  if (impl_->stage) {
    impl_->stage->wait_for_kernels();
  }
}

std::vector<LayoutCallSite> Model::layout_calls() const {
  return impl_->stage ? impl_->stage->layout_calls() : std::vector<LayoutCallSite>{};
}

std::vector<QuantizedEngineCallSite> Model::quantized_engine_calls() const {
  return impl_->stage ? impl_->stage->quantized_engine_calls() : std::vector<QuantizedEngineCallSite>{};
}

std::vector<InPlaceCallSite> Model::in_place_calls() const {
  return impl_->stage ? impl_->stage->in_place_calls() : std::vector<InPlaceCallSite>{};
}

AttributeFreezingReport Model::attribute_freezing() const {
  return impl_->stage ? impl_->stage->attribute_freezing() : AttributeFreezingReport{};
}

ModelCheckReport Model::model_check() const {
  return impl_->stage ? impl_->stage->model_check()
                      : ModelCheckReport{"the bind-time stage is off (LoadOptions::specialize, or dynamic dispatch)", {}};
}

BackgroundPreparationStatus Model::background_preparation() const {
  return impl_->stage ? impl_->stage->background_preparation() : BackgroundPreparationStatus{};
}

const std::string& Model::path() const {
  return impl_->path;
}

const LoadOptions& Model::options() const {
  return impl_->options;
}

LoadTimings Model::load_timings() const {
  LoadTimings timings = impl_->timings;
  timings.heap_prefaulted_bytes = impl_->heap_prefaulted_bytes.load();
  return timings;
}

std::vector<c10::IValue> load_inputs(const std::string& path, const Model& model, const std::string& method) {
  std::vector<c10::IValue> given;
  try {
    given = load_argument_list(path);
  } catch (const TensorFileError& e) {
    throw InputError(printable_first_line(e.what()));
  }
  const c10::FunctionSchema* schema = model.method_schema(method);
  if (schema == nullptr) {
    return given; // bytecode without a schema: nothing to check the values against
  }
  try {
    return bind_arguments(*schema, given);
  } catch (const ArgumentError& e) {
    throw InputError(path + ": " + e.what());
  }
}

HugePages huge_pages() {
  HugePages report;
  report.system_mode = transparent_huge_page_mode();
  report.asked = huge_pages_asked().load();
  if (report.asked) {
    const HugePageHeapStatus heap = huge_page_heap_status();
    report.advised_bytes = heap.advised_bytes;
    report.not_advised_because = heap.not_advised_because;
  }
  report.process_huge_page_bytes = anonymous_huge_page_bytes();
  return report;
}

} // namespace lightweight_dispatch
