// Comparing a model's outputs with reference outputs.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace lightweight_dispatch {

struct Comparison {
  bool fits = true; // same count, dtypes and shapes: otherwise the reference is not for this model
  bool match = false;
  double max_abs_diff = 0.0;
  std::string mismatch; // empty when the outputs match: otherwise the first difference, in words
};

// Same count, and each pair with the same dtype and shape and |a - e| <= atol + rtol * |e| elementwise.
// NaNs match NaNs in the same places.
Comparison compare_outputs(
    const std::vector<at::Tensor>& actual,
    const std::vector<at::Tensor>& expected,
    double atol,
    double rtol);

// "Float[3, 4]": a tensor's dtype and shape, as messages show them.
std::string describe_tensor(const at::Tensor& t);

// Same count, dtypes, shapes and bytes.
bool identical_outputs(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);

} // namespace lightweight_dispatch
