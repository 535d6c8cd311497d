// Test-only hooks of the bind-time stage, read from the environment once. Only the tests set them; none changes
// an answer, only which of two agreeing ways of computing it runs.
#pragma once

#include <cstdlib>
#include <string>

namespace lightweight_dispatch {

// LIGHTWEIGHT_DISPATCH_TEST_ONLY_NO_RACE=1: every rewrite the stage times before keeping it (a compiled kernel
// that passed its checks, a max_pool2d run on a channels_last copy) is kept untimed, so a test sees it applied
// whichever side would win on the machine running it (tests/conftest.py sets it for every test).
inline bool test_asks_for_no_race() {
  static const bool asked = [] {
    const char* value = std::getenv("LIGHTWEIGHT_DISPATCH_TEST_ONLY_NO_RACE");
    return value != nullptr && std::string(value) == "1";
  }();
  return asked;
}

} // namespace lightweight_dispatch
