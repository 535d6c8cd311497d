// The public API from C++ alone (include/lightweight_dispatch/runtime.h), as an app uses it:
//   api_check GOOD.ptl GOOD.inputs.pt MISSING_OPS.ptl CORRUPT.ptl RETURNS_FOLDED.ptl SUBMODULE_METHOD.ptl
// Checks that a good model runs from 4 threads at once bit for bit like one thread (also its first calls, when
// they race to prepare the bind-time stage's kernels: each site is prepared once; with background preparation,
// once its kernels are ready; first calls racing the background run stay within 1e-5), that a model calling
// operators the build lacks is one MissingOperatorsError listing all of them, that a damaged file is a
// ModelLoadError rather than a crash, that bad inputs are an InputError, and that a submodule's method (its
// __setstate__) is not one of the model's: listed or run, it would run on the model's object. Prints one line per check
// and "api_check: N passed, N failed".
#include <lightweight_dispatch/runtime.h>

#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace ld = lightweight_dispatch;

namespace {

int passed = 0;
int failed = 0;

void check(bool ok, const std::string& what, const std::string& detail = "") {
  std::cout << (ok ? "ok   " : "FAIL ") << what << (detail.empty() ? "" : ": " + detail) << "\n";
  ++(ok ? passed : failed);
}

bool bit_identical(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].scalar_type() != b[i].scalar_type() || !a[i].sizes().equals(b[i].sizes()) ||
        !at::equal(a[i].contiguous().view(at::kByte), b[i].contiguous().view(at::kByte))) {
      return false;
    }
  }
  return true;
}

void concurrent_forward_is_bit_identical(const std::string& model_path, const std::string& inputs_path) {
  const ld::Model model = ld::Model::load(model_path);
  const std::vector<c10::IValue> inputs = ld::load_inputs(inputs_path, model);
  model.forward(inputs);
  model.wait_for_kernels(); // background preparation: from here on every call runs the same kernels
  const std::vector<at::Tensor> reference = ld::flatten_outputs(model.forward(inputs));
  check(!model.operators().empty() && !model.call_sites().empty(), "operators and call sites are reported",
        std::to_string(model.operators().size()) + " operators, " + std::to_string(model.call_sites().size()) +
            " call sites");
  bool all_static = true;
  for (const ld::OperatorUse& op : model.operators()) {
    all_static = all_static && (op.path == "static" || op.path == "jit");
  }
  check(all_static, "every operator is static or JIT-native");
  std::vector<int> differing(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        differing[t] += bit_identical(ld::flatten_outputs(model.forward(inputs)), reference) ? 0 : 1;
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  int total = 0;
  for (int d : differing) {
    total += d;
  }
  check(total == 0, "4 threads x 5 concurrent forward calls are bit-identical to one thread",
        std::to_string(total) + " differed");
}

void missing_operators_are_one_error_listing_all(const std::string& path) {
  try {
    ld::Model::load(path);
    check(false, "a model calling operators the build lacks is refused", "it loaded");
  } catch (const ld::MissingOperatorsError& e) {
    const auto& ops = e.operators();
    const bool both = ops.size() == 2 && ops[0] == "aten::erf" && ops[1] == "aten::expm1";
    check(both, "MissingOperatorsError lists every missing operator", std::to_string(ops.size()) + " listed");
    check(std::string(e.what()).find("no generated kernel for 2 operator(s)") != std::string::npos,
          "its message is lite_predictor's");
  }
}

void damaged_file_is_an_exception(const std::string& path) {
  try {
    ld::Model::load(path);
    check(false, "a damaged model file is refused", "it loaded");
  } catch (const ld::ModelLoadError& e) {
    check(std::string(e.what()).find(path) != std::string::npos, "a damaged file is a ModelLoadError naming it",
          e.what());
  }
}

void bad_inputs_are_an_input_error(const std::string& model_path, const std::string& not_inputs) {
  const ld::Model model = ld::Model::load(model_path);
  try {
    ld::load_inputs(not_inputs, model);
    check(false, "a file that is not an inputs file is refused", "it was read");
  } catch (const ld::InputError& e) {
    check(true, "a file that is not an inputs file is an InputError", e.what());
  }
  try {
    model.forward({});
    check(false, "forward without its arguments is refused", "it ran");
  } catch (const ld::InputError& e) {
    check(true, "forward without its arguments is an InputError, not a crash", e.what());
  }
}

} // namespace

bool close_to(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].sizes().equals(b[i].sizes()) || !a[i].allclose(b[i], 1e-5, 1e-5)) {
      return false;
    }
  }
  return true;
}

// 4 threads' first calls of `model`, started together so that they meet each call site at once.
std::vector<std::vector<at::Tensor>> concurrent_first_calls(const ld::Model& model, const std::vector<c10::IValue>& inputs) {
  std::vector<std::vector<at::Tensor>> outputs(4);
  std::atomic<int> waiting{4};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) {
        std::this_thread::yield();
      }
      outputs[t] = ld::flatten_outputs(model.forward(inputs));
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  return outputs;
}

// The bind-time stage through the API, Preparation::FirstCall: 4 threads make their first calls at once, so they
// race to prepare every site for the one input shape (three freshly loaded models in turn, as one race may not
// overlap). Their outputs agree bit for bit and are within 1e-5 of the model without the stage; each site was
// prepared exactly once (the others waited under its lock and ran what it compiled); the compiled kernels served
// calls; and specialize = false re-binds nothing.
void concurrent_first_calls_prepare_each_site_once(const std::string& model_path, const std::string& inputs_path) {
  ld::LoadOptions plain;
  plain.specialize = false;
  const ld::Model unspecialised = ld::Model::load(model_path, plain);
  const std::vector<c10::IValue> inputs = ld::load_inputs(inputs_path, unspecialised);
  const std::vector<at::Tensor> reference = ld::flatten_outputs(unspecialised.forward(inputs));
  ld::LoadOptions first_call;
  first_call.preparation = ld::Preparation::FirstCall;
  bool agree = true, close = true, prepared_once = true, background_runs = false;
  int64_t compiled = 0;
  size_t sites = 0;
  std::string counts; // preparations per site, each race's
  for (int race = 0; race < 3; ++race) {
    const ld::Model model = ld::Model::load(model_path, first_call);
    const std::vector<std::vector<at::Tensor>> outputs = concurrent_first_calls(model, inputs);
    for (const auto& output : outputs) {
      agree = agree && bit_identical(output, outputs[0]);
      close = close && close_to(output, reference);
    }
    counts += race == 0 ? "" : " |";
    for (const ld::SpecializedCallSite& site : model.specialized_sites()) {
      prepared_once = prepared_once && site.preparations == 1;
      compiled += site.specialized_calls;
      counts += " " + std::to_string(site.preparations);
    }
    sites = model.specialized_sites().size();
    background_runs = background_runs || model.background_preparation().runs != 0;
  }
  check(agree, "4 threads' concurrent first calls of a specialised model agree bit for bit");
  check(close, "those first calls are within 1e-5 of the model without the bind-time stage");
  check(sites > 0 && prepared_once, "each specialised site was prepared exactly once for the one shape",
        std::to_string(sites) + " sites, preparations per site:" + counts);
  check(compiled > 0, "the compiled kernels served the first calls", std::to_string(compiled) + " compiled calls");
  check(unspecialised.specialized_sites().empty(), "LoadOptions::specialize = false re-binds no site");
  check(!background_runs, "Preparation::FirstCall starts no background run");
}

// Preparation::Background (the default): 4 threads' first calls run while the kernels are prepared off their
// thread; each stays within 1e-5 of the first-call model's; one background run prepared every site; once it is
// done, calls run the compiled kernels, bit for bit alike.
void background_preparation_serves_compiled_kernels_after_it(const std::string& model_path, const std::string& inputs_path) {
  ld::LoadOptions first_call;
  first_call.preparation = ld::Preparation::FirstCall;
  const ld::Model reference_model = ld::Model::load(model_path, first_call);
  const ld::Model model = ld::Model::load(model_path);
  const std::vector<c10::IValue> inputs = ld::load_inputs(inputs_path, model);
  const std::vector<at::Tensor> reference = ld::flatten_outputs(reference_model.forward(inputs));
  std::vector<std::vector<at::Tensor>> outputs(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { outputs[t] = ld::flatten_outputs(model.forward(inputs)); });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  bool close = true;
  for (const auto& output : outputs) {
    close = close && close_to(output, reference);
  }
  check(close, "first calls during background preparation are within 1e-5 of the compiled kernels' results");
  model.wait_for_kernels();
  const ld::BackgroundPreparationStatus status = model.background_preparation();
  check(status.runs >= 1 && !status.running && status.error.empty() && status.busy_ms > 0,
        "a background run prepared the kernels", std::to_string(status.runs) + " run(s), " +
            std::to_string(status.busy_ms) + " ms");
  int64_t unprepared = 0, compiled_before = 0;
  for (const ld::SpecializedCallSite& site : model.specialized_sites()) {
    unprepared += site.prepare_ms > 0 ? 0 : 1;
    compiled_before += site.specialized_calls;
  }
  check(unprepared == 0, "every site was prepared by the background run");
  const std::vector<at::Tensor> first = ld::flatten_outputs(model.forward(inputs));
  const std::vector<at::Tensor> second = ld::flatten_outputs(model.forward(inputs));
  int64_t compiled_after = 0;
  for (const ld::SpecializedCallSite& site : model.specialized_sites()) {
    compiled_after += site.specialized_calls;
  }
  check(compiled_after > compiled_before && bit_identical(first, second) && close_to(first, reference),
        "after it, calls run the compiled kernels", std::to_string(compiled_after - compiled_before) + " compiled calls");
  check(model.background_preparation().runs == status.runs, "calls with prepared shapes start no new run");
}

// Folded calls (results from constants and input shapes only) through the API: GOOD.ptl (an SSD head: its anchors
// are folded) called with its inputs and with smaller feature maps in turn gives, each time, what the model gives
// without the stage; a caller writing into what a call returned (RETURNS_FOLDED.ptl returns a folded tensor)
// does not change what the next call returns.
void folded_calls_follow_the_input_shapes(const std::string& model_path, const std::string& inputs_path,
    const std::string& returns_folded_path) {
  ld::LoadOptions plain;
  plain.specialize = false;
  const ld::Model model = ld::Model::load(model_path);
  const ld::Model reference = ld::Model::load(model_path, plain);
  const std::vector<c10::IValue> given = ld::load_inputs(inputs_path, model);
  std::vector<c10::IValue> smaller;
  for (const c10::IValue& input : given) {
    const at::Tensor& t = input.toTensor();
    smaller.emplace_back(at::randn({t.size(0), t.size(1), t.size(2) - t.size(2) / 5, t.size(3) - t.size(3) / 5}));
  }
  bool close = true;
  for (int i = 0; i < 4; ++i) {
    const std::vector<c10::IValue>& inputs = i % 2 == 0 ? given : smaller;
    close = close && close_to(ld::flatten_outputs(model.forward(inputs)), ld::flatten_outputs(reference.forward(inputs)));
    model.wait_for_kernels();
  }
  int64_t computed = 0;
  const std::vector<ld::FoldedCallSite> folded = model.folded_calls();
  for (const ld::FoldedCallSite& call : folded) {
    computed = std::max(computed, call.computed);
  }
  check(!folded.empty() && close, "folded calls give the unspecialised results for inputs of two shapes in turn",
        std::to_string(folded.size()) + " folded calls");
  check(computed == 4, "a folded call computes again whenever its input shape changes",
        "computed " + std::to_string(computed) + " times in 4 calls");
  const ld::Model returns_folded = ld::Model::load(returns_folded_path);
  const std::vector<c10::IValue> x = {at::randn({2, 5})};
  const at::Tensor first = ld::flatten_outputs(returns_folded.forward(x)).back();
  const at::Tensor expected = first.clone();
  {
    c10::InferenceMode inference_mode; // outputs are inference tensors: written to under the same mode
    first.add_(100);                   // the caller's tensor: the model's remembered one must not change with it
  }
  const at::Tensor second = ld::flatten_outputs(returns_folded.forward(x)).back();
  check(!returns_folded.folded_calls().empty() && returns_folded.folded_calls().front().reused > 0 &&
            at::equal(second, expected),
        "a folded result the model returns is the caller's own copy");
}

void a_submodules_method_is_not_the_models(const std::string& path) {
  const ld::Model model = ld::Model::load(path);
  const std::vector<std::string> names = model.method_names();
  check(std::find(names.begin(), names.end(), "forward") != names.end() &&
            std::find(names.begin(), names.end(), "__setstate__") == names.end(),
        "the model's methods are its own class's, not a submodule's __setstate__",
        std::to_string(names.size()) + " listed");
  try {
    model.run_method("__setstate__", {});
    check(false, "running a submodule's method is a RunError", "it ran");
  } catch (const ld::RunError& e) {
    const std::string what = e.what();
    check(what.find("has no method '__setstate__'") != std::string::npos &&
              what.find("is a submodule's") != std::string::npos,
          "running a submodule's method is a RunError", what);
  }
}

// forward and _forward_impl inline the same code: bind-time freezing freezes it once and gives _forward_impl
// forward's program; run by name, it must compute what forward does, and what the model does without the stage.
void a_method_sharing_a_frozen_program_runs_it(const std::string& path) {
  c10::InferenceMode inference_mode;
  const ld::Model model = ld::Model::load(path);
  ld::LoadOptions plain_options;
  plain_options.specialize = false;
  const ld::Model plain = ld::Model::load(path, plain_options);
  const ld::AttributeFreezingReport freezing = model.attribute_freezing();
  check(freezing.applied && freezing.frozen_functions == 2 && freezing.shared_programs == 1,
        "forward and _forward_impl are frozen once", std::to_string(freezing.frozen_functions) + " method(s), " +
            std::to_string(freezing.shared_programs) + " sharing");
  const at::Tensor x = at::randn({2, 8, 9, 9});
  for (int run = 0; run < 3; ++run) { // the first runs, then the prepared kernels
    const at::Tensor by_name = model.run_method("_forward_impl", {x.clone()}).toTensor();
    const at::Tensor forward = model.forward({x.clone()}).toTensor();
    const at::Tensor reference = plain.run_method("_forward_impl", {x.clone()}).toTensor();
    const double off_forward = by_name.sub(forward).abs().max().item<double>();
    const double off_reference = by_name.sub(reference).abs().max().item<double>();
    check(off_forward <= 1e-5 && off_reference <= 1e-5,
          "run " + std::to_string(run) + ": _forward_impl by name agrees with forward and with no stage",
          "largest differences " + std::to_string(off_forward) + ", " + std::to_string(off_reference));
  }
}

int main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: api_check GOOD.ptl GOOD.inputs.pt MISSING_OPS.ptl CORRUPT.ptl RETURNS_FOLDED.ptl "
                 "SUBMODULE_METHOD.ptl FORWARDS_TO_AN_IMPLEMENTATION.ptl\n";
    return 2;
  }
  try {
    concurrent_forward_is_bit_identical(argv[1], argv[2]);
    concurrent_first_calls_prepare_each_site_once(argv[1], argv[2]);
    background_preparation_serves_compiled_kernels_after_it(argv[1], argv[2]);
    folded_calls_follow_the_input_shapes(argv[1], argv[2], argv[5]);
    missing_operators_are_one_error_listing_all(argv[3]);
    damaged_file_is_an_exception(argv[4]);
    bad_inputs_are_an_input_error(argv[1], argv[1]);
    a_submodules_method_is_not_the_models(argv[6]);
    a_method_sharing_a_frozen_program_runs_it(argv[7]);
  } catch (const std::exception& e) {
    check(false, "no unexpected exception", e.what());
  }
  std::cout << "api_check: " << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
