#include <lightweight_dispatch/values.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <sstream>

namespace lightweight_dispatch {

std::string describe_tensor(const at::Tensor& t) {
  std::ostringstream out;
  out << t.scalar_type() << t.sizes();
  return out.str();
}

Comparison compare_outputs(
    const std::vector<at::Tensor>& actual,
    const std::vector<at::Tensor>& expected,
    double atol,
    double rtol) {
  Comparison result;
  if (actual.size() != expected.size()) {
    result.fits = false;
    result.mismatch = "the model returned " + std::to_string(actual.size()) + " tensor(s), the reference has " +
        std::to_string(expected.size());
    return result;
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    const at::Tensor& a = actual[i];
    const at::Tensor& e = expected[i];
    if (a.scalar_type() != e.scalar_type() || a.sizes() != e.sizes()) {
      result.fits = false;
      result.mismatch = "output " + std::to_string(i) + " is " + describe_tensor(a) + ", the reference is " + describe_tensor(e);
      return result;
    }
    if (a.numel() == 0) {
      continue;
    }
    const at::Tensor a64 = a.to(at::kDouble);
    const at::Tensor e64 = e.to(at::kDouble);
    const at::Tensor diff = (a64 - e64).abs();
    const bool nan_agree = at::equal(a64.isnan(), e64.isnan());
    const at::Tensor finite_diff = at::where(a64.isnan() & e64.isnan(), at::zeros_like(diff), diff);
    result.max_abs_diff = std::max(result.max_abs_diff, finite_diff.max().item<double>());
    const bool close = (finite_diff <= atol + rtol * e64.abs()).all().item<bool>();
    if ((!close || !nan_agree) && result.mismatch.empty()) {
      std::ostringstream out;
      out << "output " << i << " differs: max |actual - expected| = " << finite_diff.max().item<double>()
          << " (atol " << atol << ", rtol " << rtol << ")";
      result.mismatch = out.str();
    }
  }
  result.match = result.mismatch.empty();
  return result;
}

bool identical_outputs(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].scalar_type() != b[i].scalar_type() || a[i].sizes() != b[i].sizes()) {
      return false;
    }
    const at::Tensor x = a[i].contiguous();
    const at::Tensor y = b[i].contiguous();
    if (x.nbytes() != y.nbytes() || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

} // namespace lightweight_dispatch
