// Comparing a model's outputs with reference outputs.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace lightweight_dispatch {

struct Comparison {
  bool match = false;
  double max_abs_diff = 0.0;
  std::string mismatch; // empty when the outputs match: otherwise the first difference, in words
};

// Same count, and each pair with the same dtype and shape and |a - e| <= atol + rtol * |e| elementwise.
Comparison compare_outputs(
    const std::vector<at::Tensor>& actual,
    const std::vector<at::Tensor>& expected,
    double atol,
    double rtol);

} // namespace lightweight_dispatch
