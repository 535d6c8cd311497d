// The model check (bind_time/model_check.h), from C++ (tests/test_model_check.py):
//   model_check_check MODEL.ptl MODEL.inputs.pt
// MODEL is frozen, with linear sites only (their results have the stock layout whichever kernels run). First the
// verdict rule on made-up timings and how inputs are named. Then, with the test hook giving the check its verdict
// (LIGHTWEIGHT_DISPATCH_TEST_ONLY_MODEL_CHECK, set here before each model loads; the no-race hook comes from the
// environment), a model's first call, its preparation run, and two more calls: the second settles (it decides
// nothing) and is followed by the check, so the third runs as the verdict says — every site on its generated kernels,
// bit for bit the model without the stage, or on its compiled kernels. Prints one line per check and
// "model_check_check: ok", or the first failure.
#include <bind_time/model_check.h>
#include <lightweight_dispatch/runtime.h>

#include <ATen/ops/equal.h>
#include <ATen/ops/zeros.h>

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace ld = lightweight_dispatch;

namespace {

bool all_ok = true;

void check(bool ok, const std::string& what, const std::string& detail = "") {
  std::cout << (ok ? "ok   " : "FAIL ") << what << (detail.empty() ? "" : ": " + detail) << "\n";
  all_ok = all_ok && ok;
}

std::string describe(const ld::PairsVerdict& verdict) {
  std::ostringstream out;
  out << "settled " << verdict.settled << ", keep " << verdict.keep_compiled << ", median ratio "
      << verdict.median_ratio << ", with " << verdict.with_compiled_ms << ", without " << verdict.without_compiled_ms;
  return out.str();
}

void check_the_verdict_rule() {
  using Pairs = std::vector<ld::TimedPair>;
  const ld::PairsVerdict one_pair = ld::judge_pairs(Pairs{{1.0, 3.0}});
  check(!one_pair.settled, "one pair never settles", describe(one_pair));
  const ld::PairsVerdict clearly_with = ld::judge_pairs(Pairs{{1.0, 2.0}, {1.1, 2.0}});
  check(clearly_with.settled && clearly_with.keep_compiled, "two pairs clearly faster with: kept", describe(clearly_with));
  const ld::PairsVerdict clearly_without = ld::judge_pairs(Pairs{{3.0, 2.0}, {2.9, 2.0}});
  check(clearly_without.settled && !clearly_without.keep_compiled, "two pairs clearly slower with: off",
      describe(clearly_without));
  const ld::PairsVerdict mixed = ld::judge_pairs(Pairs{{1.0, 2.0}, {2.0, 1.9}});
  check(!mixed.settled, "two pairs, one not clear: more pairs", describe(mixed));
  const ld::PairsVerdict near_tie = ld::judge_pairs(Pairs{{0.99, 1.0}, {0.99, 1.0}, {0.99, 1.0}, {0.99, 1.0}, {0.99, 1.0}});
  check(near_tie.settled && !near_tie.keep_compiled, "five pairs 1% faster with: a near tie, off", describe(near_tie));
  const ld::PairsVerdict ahead = ld::judge_pairs(Pairs{{0.97, 1.0}, {0.9, 1.0}, {1.2, 1.0}, {0.95, 1.0}, {0.96, 1.0}});
  check(ahead.settled && ahead.keep_compiled && ahead.median_ratio == 0.96, "five pairs, median ratio 0.96: kept",
      describe(ahead));
  // Pair by pair: a slow moment that slows both runs of a pair does not move the median ratio.
  const ld::PairsVerdict drift = ld::judge_pairs(Pairs{{0.9, 1.0}, {9.0, 10.0}, {1.1, 1.0}, {0.9, 1.0}, {1.1, 1.0}});
  check(drift.median_ratio == 0.9 && drift.keep_compiled, "ratios are taken pair by pair", describe(drift));
}

void check_input_kinds() {
  const std::string kind = ld::inputs_kind("forward",
      {at::zeros({2, 3}), at::zeros({1, 8, 4, 4}).contiguous(at::MemoryFormat::ChannelsLast),
          c10::IValue(int64_t{7}), c10::IValue(std::string("text")), c10::IValue(0.25)});
  check(kind == "forward(Float[2, 3], Float[1, 8, 4, 4] channels_last, 7, \"text\", float)", "inputs are named by kind",
      kind);
  const std::string other = ld::inputs_kind("forward", {at::zeros({2, 4})});
  check(other != ld::inputs_kind("forward", {at::zeros({2, 3})}), "other sizes are another kind", other);
}

ld::ModelCheckReport run_three_times(const std::string& model_path, const std::string& inputs_path,
    const std::string& verdict, std::vector<c10::IValue>& third_outputs, std::vector<ld::SpecializedCallSite>& sites) {
  if (verdict.empty()) {
    unsetenv("LIGHTWEIGHT_DISPATCH_TEST_ONLY_MODEL_CHECK");
  } else {
    setenv("LIGHTWEIGHT_DISPATCH_TEST_ONLY_MODEL_CHECK", verdict.c_str(), 1);
  }
  const ld::Model model = ld::Model::load(model_path);
  const std::vector<c10::IValue> inputs = ld::load_inputs(inputs_path, model);
  model.forward(inputs);     // the generated kernels; starts the preparation run
  model.wait_for_kernels();
  model.forward(inputs);     // the compiled kernels, deciding nothing: the check follows it
  const c10::IValue third = model.forward(inputs); // as the verdict says
  third_outputs = {third};
  sites = model.specialized_sites();
  return model.model_check();
}

bool every_site_counts(const std::vector<ld::SpecializedCallSite>& sites, int64_t generated, int64_t specialized) {
  bool ok = !sites.empty();
  for (const ld::SpecializedCallSite& site : sites) {
    ok = ok && site.generated_calls == generated && site.specialized_calls == specialized;
  }
  return ok;
}

std::string counts(const std::vector<ld::SpecializedCallSite>& sites) {
  std::string text;
  for (const ld::SpecializedCallSite& site : sites) {
    text += (text.empty() ? "" : ", ") + std::to_string(site.generated_calls) + " generated / " +
            std::to_string(site.specialized_calls) + " compiled";
  }
  return text;
}

void check_the_verdicts(const std::string& model_path, const std::string& inputs_path) {
  ld::LoadOptions no_stage;
  no_stage.specialize = false;
  const ld::Model plain = ld::Model::load(model_path, no_stage);
  const at::Tensor stock = ld::flatten_outputs(plain.forward(ld::load_inputs(inputs_path, plain))).at(0);

  std::vector<c10::IValue> third;
  std::vector<ld::SpecializedCallSite> sites;
  ld::ModelCheckReport report = run_three_times(model_path, inputs_path, "without_compiled", third, sites);
  check(report.not_run_because.empty() && report.checks.size() == 1, "one check, after the settled call",
      report.not_run_because);
  if (report.checks.size() == 1) {
    const ld::ModelCheckOfInputs& checked = report.checks.front();
    check(checked.compared && !checked.compiled_kept && checked.pairs >= ld::kModelCheckMinPairs &&
              checked.pairs <= ld::kModelCheckMaxPairs && checked.with_compiled_ms > 0 && checked.without_compiled_ms > 0,
        "the check timed its pairs and turned the compiled kernels off",
        checked.inputs + ", " + std::to_string(checked.pairs) + " pairs, note '" + checked.note + "'");
  }
  check(every_site_counts(sites, 2, 1), "the third call ran every site's generated kernels; the check's runs uncounted",
      counts(sites));
  const at::Tensor off = ld::flatten_outputs(third.at(0)).at(0);
  check(at::equal(off, stock), "after it, the outputs are the model's without the stage, bit for bit");

  report = run_three_times(model_path, inputs_path, "with_compiled", third, sites);
  check(report.checks.size() == 1 && report.checks.front().compared && report.checks.front().compiled_kept,
      "with the verdict for them, the compiled kernels stay");
  check(every_site_counts(sites, 1, 2), "the third call ran the compiled kernels", counts(sites));

  report = run_three_times(model_path, inputs_path, "", third, sites);
  check(report.checks.empty() && report.not_run_because.find("LIGHTWEIGHT_DISPATCH_TEST_ONLY_NO_RACE") != std::string::npos,
      "under the no-race hook alone, no check runs, and the report says why", report.not_run_because);
  check(every_site_counts(sites, 1, 2), "and the compiled kernels run", counts(sites));
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: model_check_check MODEL.ptl MODEL.inputs.pt\n";
    return 2;
  }
  try {
    check_the_verdict_rule();
    check_input_kinds();
    check_the_verdicts(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::cout << "FAIL " << e.what() << "\n";
    return 1;
  }
  if (!all_ok) {
    return 1;
  }
  std::cout << "model_check_check: ok\n";
  return 0;
}
