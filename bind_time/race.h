// Timing a compiled kernel against the generated kernels it would replace, before the stage keeps it: a cheap
// call's fixed cost (~5 us through LibTorch's oneDNN Graph kernel) can outweigh what it saves, and on some machines
// a big one loses too (oneDNN Graph's matmul against ATen's MKL linear, on AVX2).
#pragma once

#include <functional>

namespace lightweight_dispatch {

// At most this many rounds each side; two once one side is clearly ahead (its best run this much shorter).
constexpr int kRaceRounds = 5;
constexpr double kClearlyAhead = 1.3;
// The compiled kernel wins only if its best run beats the generated kernels' by this much: a near tie goes to the
// generated kernels (what --no-specialize runs), so a race that noise decides (DistilBERT's big linears, within a
// few percent of each other on a busy machine) cannot make the stage slower than no stage.
constexpr double kWinningMargin = 1.05;

// How long one call of `run` took, in milliseconds (steady clock): what every timed choice of the stage compares.
double ms_of(const std::function<void()>& run);

// Whether `compiled` beats `generated`, each run in turn (compiled first) and its best run kept; `before_generated`,
// if given, runs untimed before each run of `generated` (a fresh copy of what it overwrites).
bool compiled_wins_race(const std::function<void()>& compiled, const std::function<void()>& generated,
    const std::function<void()>& before_generated = {});

} // namespace lightweight_dispatch
