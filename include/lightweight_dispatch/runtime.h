// lightweight_dispatch: run a PyTorch lite-interpreter model (.ptl) with statically dispatched kernels.
//
// The one header an app includes. It links `lightweight_dispatch::runtime` and a kernel library generated
// for its op set (CMake: lightweight_dispatch_add_kernels). Typical use:
//
//   auto model = lightweight_dispatch::Model::load("mobilenet_v2.ptl");   // checks, loads, binds
//   c10::IValue out = model.forward({at::rand({1, 3, 224, 224})});       // any thread, concurrently
//   for (const auto& op : model.operators()) { ... op.name, op.path ... }
//
// Every failure is a lightweight_dispatch::Error (a std::runtime_error) whose message is the one
// lite_predictor prints; the library never prints, exits or installs signal handlers.
#pragma once

#include <lightweight_dispatch/bind_time_report.h>
#include <lightweight_dispatch/kernel_table.h>
#include <lightweight_dispatch/values.h>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// --- errors: one class per way a model can fail, each with lite_predictor's message

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The file is missing, damaged (bad archive, CRC-32, tensor storage), not a lite model, or its bytecode
// fails the checks made at load.
class ModelLoadError : public Error {
 public:
  using Error::Error;
};

// Static dispatch: the model calls operators this build has no kernel for. All of them, at once.
class MissingOperatorsError : public Error {
 public:
  MissingOperatorsError(const std::string& message, std::vector<std::string> operators)
      : Error(message), operators_(std::move(operators)) {}
  const std::vector<std::string>& operators() const {
    return operators_;
  }

 private:
  std::vector<std::string> operators_;
};

// A load option this LibTorch cannot honour (an unknown quantized engine).
class OptionError : public Error {
 public:
  using Error::Error;
};

// Inputs that do not fit: an unreadable inputs file, too many or missing arguments, a wrong type.
class InputError : public Error {
 public:
  using Error::Error;
};

// The model raised, or a kernel failed, while running.
class RunError : public Error {
 public:
  using Error::Error;
};

// --- options

enum class Dispatch {
  Static,  // every operator call bound to a generated kernel; an operator the build lacks is an error
  Dynamic, // LibTorch's stock path through the c10 dispatcher (for comparison)
};

enum class Interpreter {
  Lightweight, // lightweight_dispatch's own bytecode loop (bytecode checked once at load); the load leaves out the
               // model's debug records (under code/), which only LibTorch's error messages read
  Stock,       // LibTorch's InterpreterState (the load reads and checks every record)
};

// The generated kernels a build links: by default, those of the kernel library linked into the program
// (lightweight_dispatch_add_kernels). Resolved in the app's own code, so the runtime library itself
// needs no particular kernel library.
struct KernelLibrary {
  c10::ArrayRef<GeneratedKernel> kernels;
  void (*register_with_dispatcher)(); // the project's own operators, for Dispatch::Dynamic

  static KernelLibrary linked() {
    return {generated_kernels(), &register_custom_ops_with_dispatcher};
  }
};


struct LoadOptions {
  Dispatch dispatch = Dispatch::Static;
  // Unset: Lightweight with Dispatch::Static, Stock with Dispatch::Dynamic (the unmodified stock runtime).
  std::optional<Interpreter> interpreter;
  // "qnnpack", "fbgemm", "x86" or "onednn": set process-wide before the model loads, since a quantized
  // model's packed weights are rebuilt at load with the engine in force. Unset: leave it as it is.
  std::optional<std::string> quantized_engine;
  KernelLibrary kernels = KernelLibrary::linked();
  // Raise glibc's mmap and trim thresholds, once per process, so an inference's large temporaries are reused
  // from the heap instead of arriving as fresh zero pages on every call (MobileNetV2 in a fresh process:
  // 15 -> 11.5 ms, README). A process-wide setting: turn it off if the app tunes malloc itself.
  bool keep_large_allocations_in_heap = true;
  // With keep_large_allocations_in_heap, each thread other than the main one that runs a model advises its malloc
  // arena (a 64 MB region) for transparent huge pages, once (Linux with glibc, where THP is "madvise" or
  // "always"): the weights oneDNN reorders on the background preparation thread then sit on 2 MB pages, and a run
  // after other work has evicted the caches walks far fewer page tables. Costs address space, not memory; the
  // main heap is left alone. See huge_pages().
  bool heap_on_huge_pages = true;
  // With keep_large_allocations_in_heap, a load on the process's main thread (whose allocations come from the
  // main heap) has a helper thread fault in the heap's pages above those in use, up to the model file's size and
  // 32 MB more (Linux 5.14+, glibc: MADV_POPULATE_WRITE, which leaves the pages' contents alone): the loader's
  // copies of the tensors and the first run's activations then find their pages mapped (EfficientNet-B0, load +
  // first run: README). It stops as the first forward (or run_method) starts: going on beside a run slowed the
  // run. Costs resident memory the process had not touched yet, never more than the heap's 64 MB pad above what
  // malloc handed out.
  bool prefault_heap = true;
  // Dispatch::Static: the bind-time stage. conv2d and linear call sites whose weight and parameters are
  // constants (a frozen model) run a kernel oneDNN Graph compiles for them on their first call per input shape,
  // with the activations directly following it (relu, hardtanh, silu, sigmoid, hardswish, tanh, erf gelu) and
  // a residual add fused in (and a 1x1 conv with the
  // depthwise conv it alone feeds), channels_last where a result only
  // feeds other such sites; each shape is checked once against the generated kernels, on a seeded probe input
  // and on the call's own tensors (and raced against them when the call is cheap). Calls of operators that are
  // not deterministic (nondeterministic_seeded: randn, dropout, ...) are never folded. Off: every site runs its
  // generated kernel, bit for bit the stock kernels' results.
  bool specialize = true;
  // When the bind-time stage compiles a site's kernel for a new input shape.
  Preparation preparation = Preparation::Background;
  // The bind-time stage's model check (Model::model_check): once the runs on some inputs have settled, the
  // model runs a few more times inside that call (DistilBERT at 1 thread: up to 10 runs, ~1.5 s, once per kind
  // of inputs), and later runs keep the compiled kernels only if whole runs with them were faster. Off: the
  // races' choices stand, and no call runs the model more than once.
  bool model_check = true;
  // With specialize: each quantized conv and linear whose packed weights are a constant (a frozen model, or one
  // the stage freezes) also gets them packed for LibTorch's other quantized engines, and runs, per input shape,
  // the fastest packing among those whose results stay within one quantization step of the loaded one's
  // (lite_predictor --qengine auto). Off by default: the engines round differently, so an answer may move by a
  // step at each such call; quantized_engine still chooses the engine the model loads under. Packing for another
  // engine switches the process's quantized engine for a moment during this load (as quantized_engine does):
  // do not load another quantized model from another thread meanwhile.
  bool choose_quantized_engines = false;
};

// --- what a model's operators are bound to

struct OperatorUse {
  std::string name; // "aten::add.Tensor"
  std::string path; // "static", "jit" (implemented by the interpreter) or "dispatcher"
  std::string reason; // why a statically bound operator goes through the dispatcher; empty otherwise
};

struct CallSite {
  std::string function; // the bytecode function ("forward", an upgrader, ...)
  size_t instruction;   // the OP instruction's index in that function's bytecode
  OperatorUse op;
  // What the site runs: op.path ("static", "jit", "dispatcher"), or the bind-time stage's kernel:
  // "static+fused(conv2d,hardtanh_)" (the conv2d site, and the hardtanh_ site it absorbed),
  // "static+fused(conv2d,hardtanh_,conv2d,hardtanh_)" (a 1x1 -> depthwise pair), "static+onednn(linear)",
  // "static+folded" (a folded call: Model::folded_calls).
  std::string runs;
};




// Where Model::load's time went, in milliseconds.
struct LoadTimings {
  double file_check_ms = 0;  // archive directory, the CRC-32 of every record the loader reads
  double libtorch_load_ms = 0; // LibTorch's loader (packed weights rebuilt here) and the tensor checks
  double bind_ms = 0;        // every call site bound to its generated kernel (static dispatch)
  double specialize_ms = 0;  // the bind-time stage finding and re-binding its sites (kernels compile later,
                             // on each site's first call per shape: part of the first run)
  double prepare_ms = 0;     // forward's bytecode checked for the lightweight interpreter
  // Heap a helper thread faulted in ahead of the load and the first run (LoadOptions::prefault_heap): final once
  // the first run by a caller has returned (0 before).
  size_t heap_prefaulted_bytes = 0;
};

// --- the model

class Model {
 public:
  // Checks the file (archive directory, every record's CRC-32 the loader reads), loads it, checks its tensors, binds every
  // call site (Dispatch::Static) and prepares the interpreter. Throws ModelLoadError,
  // MissingOperatorsError or OptionError.
  static Model load(const std::string& path, const LoadOptions& options = {});

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // Runs forward (or another method) on its arguments after self, all of them (load_inputs fills defaults),
  // under c10::InferenceMode. Safe to call from several threads at once: binding is done at load and
  // read-only afterwards; a model that assigns its attributes (SET_ATTR in its bytecode) runs one call at a
  // time, since a module object's attributes cannot be assigned from several threads at once. Throws
  // InputError for a wrong number of arguments, RunError if the model fails.
  c10::IValue forward(std::vector<c10::IValue> inputs) const;
  c10::IValue run_method(const std::string& method, std::vector<c10::IValue> inputs) const;

  // The model's method names, and one's schema (arguments after self, with their defaults) if the bytecode
  // carries it.
  std::vector<std::string> method_names() const;
  const c10::FunctionSchema* method_schema(const std::string& method) const;

  // Every distinct operator the model calls, sorted by name, with its path; and every call site.
  const std::vector<OperatorUse>& operators() const;
  std::vector<CallSite> call_sites() const;
  // The call sites the bind-time stage re-bound, with their counters now.
  std::vector<SpecializedCallSite> specialized_sites() const;
  // The calls it folded, with their counters now.
  std::vector<FoldedCallSite> folded_calls() const;
  // The call sites it runs in another layout where that is faster (max_pool2d), with their counters now.
  std::vector<LayoutCallSite> layout_calls() const;
  // The products and sums it writes into an operand nothing else holds, with their counters now.
  std::vector<InPlaceCallSite> in_place_calls() const;
  // The quantized calls choosing their engine (LoadOptions::choose_quantized_engines), with their counters now.
  std::vector<QuantizedEngineCallSite> quantized_engine_calls() const;
  // Preparation::Background: returns once no preparation run is running (at once otherwise). After the first
  // call returns and this, every site that call reached has its kernel for that call's shapes (or keeps its
  // generated kernels, with a note).
  void wait_for_kernels() const;
  // Background preparation so far: runs, whether one runs, their time, the last one's failure (all zero and
  // empty without it).
  BackgroundPreparationStatus background_preparation() const;
  // What bind-time freezing did to a model saved without freezing (all zero without the stage).
  AttributeFreezingReport attribute_freezing() const;
  // The model check's verdicts so far: per kind of inputs, whether the runs keep the compiled kernels, and the
  // timed runs that decided it (empty without the stage; `not_run_because` says why a model is never checked).
  ModelCheckReport model_check() const;

  const std::string& path() const;
  const LoadOptions& options() const;
  LoadTimings load_timings() const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// --- inputs, as lite_predictor reads them

// forward's arguments from a file written by Python's `torch.save([...])` (tensors, numbers, bools,
// strings, None, lists, tuples, dicts), converted to the types `method` declares and completed with its
// defaults. Throws InputError naming the file and the argument.
std::vector<c10::IValue> load_inputs(const std::string& path, const Model& model, const std::string& method = "forward");

// flatten_outputs, compare_outputs, load_tensor_list, save_value: values.h.

// The quantized engines this LibTorch has ("qnnpack", "onednn", "x86", "fbgemm"), and the one in force.
std::vector<std::string> supported_quantized_engines();
std::string current_quantized_engine();

// What LoadOptions::heap_on_huge_pages did in this process, and how much of its memory is on huge pages now.
struct HugePages {
  std::string system_mode;            // the kernel's THP mode: "always", "madvise", "never" ("" unknown)
  bool asked = false;                 // a load asked for it
  size_t advised_bytes = 0;           // heap advised for huge pages (0 when not)
  std::string not_advised_because;    // why not, when asked and not advised
  size_t process_huge_page_bytes = 0; // this process's anonymous memory on huge pages now
};
HugePages huge_pages();

} // namespace lightweight_dispatch
