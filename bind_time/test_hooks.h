// Test-only hooks of the bind-time stage, read from the environment once. Only the tests set them: one keeps a
// timed rewrite untimed (the answer is the same either way), one makes every race go to the generated kernels, one
// compiles wrong kernels for the checks to catch, and LIGHTWEIGHT_DISPATCH_TEST_ONLY_MODEL_CHECK=with_compiled or
// =without_compiled runs the model check (model_check.h) even under the first and gives it that verdict.
#pragma once

#include <cstdlib>
#include <string>

namespace lightweight_dispatch {

// Whether the environment sets `name` to "1" (read once per hook: each caller keeps the answer).
inline bool test_hook_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string(value) == "1";
}

// What the environment sets `name` to ("" if nothing).
inline std::string test_hook_value(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// LIGHTWEIGHT_DISPATCH_TEST_ONLY_NO_RACE=1: every rewrite the stage times before keeping it (a compiled kernel
// that passed its checks, a max_pool2d run on a channels_last copy) is kept untimed, so a test sees it applied
// whichever side would win on the machine running it (tests/conftest.py sets it for every test).
inline bool test_asks_for_no_race() {
  static const bool asked = test_hook_set("LIGHTWEIGHT_DISPATCH_TEST_ONLY_NO_RACE");
  return asked;
}

// LIGHTWEIGHT_DISPATCH_TEST_ONLY_GENERATED_WINS=1: every race of a compiled kernel against the generated kernels is
// run, then lost, so a test sees where each race ran (the note it leaves) whichever side its machine favours.
inline bool test_asks_generated_kernels_to_win() {
  static const bool asked = test_hook_set("LIGHTWEIGHT_DISPATCH_TEST_ONLY_GENERATED_WINS");
  return asked;
}

// LIGHTWEIGHT_DISPATCH_TEST_ONLY_PAIRS_APART=1: with LIGHTWEIGHT_DISPATCH_TEST_ONLY_NO_RACE, a pair of sites that the
// stage times as one kernel against two (a 1x1 conv with SiLU or hardswish feeding a depthwise conv) runs as two,
// untimed; without it, as one. Either way both are compiled and checked.
inline bool test_asks_pairs_to_run_apart() {
  static const bool asked = test_hook_set("LIGHTWEIGHT_DISPATCH_TEST_ONLY_PAIRS_APART");
  return asked;
}

// LIGHTWEIGHT_DISPATCH_TEST_ONLY_WRONG_WEIGHTS=1: every partition is compiled with its first site's weight doubled,
// and a quantized call's weights are packed for the other engines with a bias of 3 b + 1 (quantized_engines.h),
// kernels the checks must catch (tests/test_stage_correctness.py, tests/test_quantized_engine_choice.py); it
// changes no generated kernel.
inline bool test_asks_for_wrong_weights() {
  static const bool asked = test_hook_set("LIGHTWEIGHT_DISPATCH_TEST_ONLY_WRONG_WEIGHTS");
  return asked;
}

} // namespace lightweight_dispatch
