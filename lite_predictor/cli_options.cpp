#include <lite_predictor/cli_options.h>

#include <cstdlib>
#include <limits>

namespace lightweight_dispatch {

namespace {

double parse_non_negative_double(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= 0) || value == std::numeric_limits<double>::infinity()) {
    throw UsageError(flag + " expects a non-negative number, got '" + text + "'");
  }
  return value;
}

int parse_int(const std::string& flag, const std::string& text, int minimum) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < minimum || value > 1000000000L) {
    throw UsageError(flag + " expects an integer >= " + std::to_string(minimum) + ", got '" + text + "'");
  }
  return static_cast<int>(value);
}

} // namespace

const char* interpreter_name(InterpreterKind kind) {
  return kind == InterpreterKind::Lightweight ? "lightweight" : "stock";
}

std::string usage_text() {
  return R"(usage: lite_predictor MODEL.ptl [options]

Runs a model saved for the PyTorch lite interpreter. With static dispatch (the default in a
lightweight-dispatch build) every operator call is bound to a generated kernel that calls the CPU
kernel directly; an operator the build lacks is an error at load, never a silent fallback.

options:
  --input F          forward's arguments: a torch.save'd list of tensors, numbers, strings, None, lists,
                     tuples and dicts; trailing ones left out take forward's defaults (default:
                     MODEL.inputs.pt beside the model)
  --expected F       reference outputs to compare with (default: MODEL.expected.pt beside the model, if any)
  --atol A           absolute tolerance for the comparison (default 1e-5)
  --rtol R           relative tolerance for the comparison (default 1e-5)
  --iters N          timed runs after warm-up (default 10)
  --warmup N         untimed runs after the first (default 1). The bind-time stage's races and its
                     model check run in the first few calls (DistilBERT: the fourth): a warm-up of 4
                     or more keeps their cost out of the timed runs
  --threads T        intra-op threads (default: LibTorch's choice)
  --qengine E        quantized engine: qnnpack, fbgemm, x86 or onednn (those this LibTorch has). Set
                     before the model loads, since a quantized model's packed weights are rebuilt at
                     load with it. Default: LibTorch's default, x86 on x86-64 (what eager PyTorch and
                     dump_ops.py's reference outputs use); qnnpack is what ARM phones run. Engines
                     round differently: compare outputs made with the same engine.
                     auto: load under the default engine, and let the bind-time stage run each
                     quantized conv and linear with constant weights on the engine fastest for
                     it, among those whose results stay within one quantization step of the
                     default engine's at that call (outputs may then differ from the stock
                     interpreter's by a few steps; the report lists each call's engine)
  --dispatch MODE    static: generated kernels; dynamic: the stock interpreter and the dispatcher
  --interpreter I    the loop that runs the bytecode: lightweight (lite_predictor's own, checks the
                     bytecode once at load; its errors name the function and instruction, so the load
                     leaves out the model's debug records) or stock (LibTorch's InterpreterState, whose
                     errors LibTorch annotates from those records); default: lightweight with
                     --dispatch static, stock with --dispatch dynamic
  --parallel K       after the normal runs, run the same loaded module from K threads at once, each
                     for --iters runs; report throughput and whether every output was identical
  --profile-ops      after the timed runs, run --iters more timing every operator call, and report
                     each operator's calls, time per run and share of the run (the report's timing
                     line still comes from runs without the timer; operators are named without overload;
                     a bind-time kernel run at the residual add after its conv counts as the conv)
  --no-crash-guard   leave the fault signals' handlers alone (for debuggers, profilers and core dumps);
                     by default a crash inside LibTorch on a damaged model (SIGSEGV, SIGBUS, SIGABRT,
                     ...) is reported with the phase it happened in and an exit code instead of killing
                     the process. --in-process is the same (its name from when the guard was a child
                     process)
  --no-specialize    turn the bind-time stage off: every call site runs its generated kernel (bit for bit
                     the stock kernels' results). By default conv2d and linear sites with constant weights
                     (frozen models, or unfrozen ones whose attributes nothing writes) run a oneDNN Graph
                     kernel compiled on their first call per input shape, with the activations that
                     follow (relu, hardtanh, silu, sigmoid, hardswish, tanh, gelu) and a residual add
                     fused in (x + conv(x), or out += x where nothing else sees the tensor written), and
                     a 1x1 conv in one kernel with the depthwise or grouped 3x3 conv it feeds (timed per
                     shape against the two convs' own kernels, but for a depthwise conv after ReLU or a
                     clamp), wherever that kernel
                     agrees with the generated ones and is timed 5% faster than them (sites computing the
                     same problem share one timing); the report lists them, and why a site kept its
                     generated kernels. Once the runs on some inputs settle, the model check runs the
                     model a few more times on copies of them, with and without the compiled kernels in
                     turn, and later runs on such inputs keep the compiled kernels only if the runs with
                     them were 2% faster (the report's "model check" line)
  --no-model-check   keep the races' choices without the model check: no call runs the model more than
                     once (the check's extra runs take one call up to ~10 runs' time, once per kind of
                     inputs)
  --prepare WHEN     when the bind-time stage compiles a site's kernel for a new input shape:
                     background (default): the first run runs the generated kernels, then the model runs
                     once more on a thread of its own to compile and check every site; lite_predictor
                     waits for it before the warm-up, and compares and saves the outputs of a run made
                     after it. first-call: the first run compiles and checks each site as it reaches it
                     (a slower first run; every run's outputs from the kernels each site keeps)
  --default-malloc   leave glibc's allocator as it is. By default its thresholds are raised so that an
                     inference's large temporaries are reused from the heap, not mmap'd afresh each call,
                     and (Linux, where transparent huge pages are "madvise" or "always") the malloc arena
                     of the background preparation thread is advised for 2 MB pages, so the weights oneDNN
                     reorders there sit on huge pages: fewer page-table walks on a run after other work
                     evicted the caches; and a helper thread faults in the heap's next pages while
                     the model loads (below)
  --no-heap-prefault by default (Linux 5.14+, glibc), while the model loads a helper thread faults in
                     the heap's next pages (up to the model file's size and 32 MB more), so that the
                     loader's copies of the tensors and the first run's activations find them mapped;
                     this leaves each page to fault in when first written (for comparison)
  --save-outputs F   write the outputs for torch.load, as the model returns them (tuples, lists, dicts)
  --json             print one JSON object on stdout instead of the readable summary
  --list-ops         print the operators this build has generated kernels for (with their schemas
                     when combined with --json) and exit; no model needed
  -h, --help         show this help

exit codes: 0 ok (outputs match, or nothing to compare), 1 outputs differ, 2 usage error,
            3 cannot load the model (missing, damaged, not a lite model), 4 an operator is not in this
            build, 5 bad inputs or a reference that does not fit the outputs, 6 the model failed while
            running (or outputs of --parallel runs differed)
)";
}

Options parse_options(const std::vector<std::string>& args, bool static_dispatch_available) {
  Options options;
  options.dispatch = static_dispatch_available ? DispatchMode::Static : DispatchMode::Dynamic;
  std::optional<InterpreterKind> interpreter;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) {
        throw UsageError(arg + " expects a value");
      }
      return args[++i];
    };
    if (arg == "-h" || arg == "--help") {
      options.help = true;
    } else if (arg == "--input") {
      options.input_path = value();
    } else if (arg == "--expected") {
      options.expected_path = value();
    } else if (arg == "--save-outputs") {
      options.save_outputs_path = value();
    } else if (arg == "--atol") {
      options.atol = parse_non_negative_double(arg, value());
    } else if (arg == "--rtol") {
      options.rtol = parse_non_negative_double(arg, value());
    } else if (arg == "--iters") {
      options.iters = parse_int(arg, value(), 1);
    } else if (arg == "--warmup") {
      options.warmup = parse_int(arg, value(), 0);
    } else if (arg == "--threads") {
      options.threads = parse_int(arg, value(), 1);
    } else if (arg == "--qengine") {
      options.qengine = value();
      options.choose_quantized_engines = *options.qengine == "auto";
      if (options.choose_quantized_engines) {
        options.qengine.reset(); // loaded under the default engine
      }
    } else if (arg == "--dispatch") {
      const std::string& mode = value();
      if (mode == "static") {
        if (!static_dispatch_available) {
          throw UsageError(
              "--dispatch static: this lite_predictor was built with USE_LIGHTWEIGHT_DISPATCH=OFF and has no "
              "generated kernels");
        }
        options.dispatch = DispatchMode::Static;
      } else if (mode == "dynamic") {
        options.dispatch = DispatchMode::Dynamic;
      } else {
        throw UsageError("--dispatch expects 'static' or 'dynamic', got '" + mode + "'");
      }
    } else if (arg == "--interpreter") {
      const std::string& kind = value();
      if (kind == "lightweight") {
        interpreter = InterpreterKind::Lightweight;
      } else if (kind == "stock") {
        interpreter = InterpreterKind::Stock;
      } else {
        throw UsageError("--interpreter expects 'lightweight' or 'stock', got '" + kind + "'");
      }
    } else if (arg == "--parallel") {
      options.parallel = parse_int(arg, value(), 1);
    } else if (arg == "--profile-ops") {
      options.profile_ops = true;
    } else if (arg == "--no-crash-guard" || arg == "--in-process") {
      options.in_process = true;
    } else if (arg == "--no-specialize") {
      options.specialize = false;
    } else if (arg == "--no-model-check") {
      options.model_check = false;
    } else if (arg == "--prepare") {
      const std::string& when = value();
      if (when == "background") {
        options.prepare_on_first_call = false;
      } else if (when == "first-call") {
        options.prepare_on_first_call = true;
      } else {
        throw UsageError("--prepare expects 'background' or 'first-call', got '" + when + "'");
      }
    } else if (arg == "--default-malloc") {
      options.default_malloc = true;
    } else if (arg == "--no-heap-prefault") {
      options.heap_prefault = false;
    } else if (arg == "--list-ops") {
      options.list_ops = true;
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "'");
    } else {
      positional.push_back(arg);
    }
  }
  options.interpreter = interpreter.value_or(
      options.dispatch == DispatchMode::Static ? InterpreterKind::Lightweight : InterpreterKind::Stock);
  if (options.help || (options.list_ops && positional.empty())) {
    return options;
  }
  if (positional.size() != 1) {
    throw UsageError(
        positional.empty() ? "missing the model file (MODEL.ptl)"
                           : "expected one model file, got " + std::to_string(positional.size()));
  }
  options.model_path = positional[0];
  if (options.choose_quantized_engines && (!options.specialize || options.dispatch != DispatchMode::Static)) {
    throw UsageError("--qengine auto: the bind-time stage chooses the engines, and it runs only with --dispatch "
                     "static and without --no-specialize");
  }
  return options;
}

} // namespace lightweight_dispatch
