#include <bind_time/race.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace lightweight_dispatch {

double ms_of(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

bool compiled_wins_race(const std::function<void()>& compiled, const std::function<void()>& generated,
    const std::function<void()>& before_generated) {
  double compiled_best = INFINITY, generated_best = INFINITY;
  for (int round = 0; round < kRaceRounds; ++round) {
    compiled_best = std::min(compiled_best, ms_of(compiled));
    if (before_generated) {
      before_generated();
    }
    generated_best = std::min(generated_best, ms_of(generated));
    if (round > 0 && std::max(compiled_best, generated_best) > kClearlyAhead * std::min(compiled_best, generated_best)) {
      break;
    }
  }
  return compiled_best * kWinningMargin < generated_best;
}

} // namespace lightweight_dispatch
