// Reading and writing lists of tensors in torch.save's format, and flattening model outputs.
#pragma once

#include <ATen/core/ivalue.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// A tensor file that cannot be read or does not hold a list of tensors.
class TensorFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads a file written by Python's `torch.save([t0, t1, ...])` (a tuple or a single tensor also works).
std::vector<at::Tensor> load_tensor_list(const std::string& path);

// Writes `tensors` so that Python's `torch.load` returns them (as a tuple; load_tensor_list reads it back). Written to a temporary file
// and renamed, so a failure leaves any previous file intact.
void save_tensor_list(const std::string& path, const std::vector<at::Tensor>& tensors);

// A model's output as a flat list of tensors, in order: tuples, lists and dict values are walked
// depth-first; ints, floats and bools become 0-dim int64, float64 and bool tensors. This mirrors
// `flatten_outputs` in scripts/dump_ops.py, which writes the expected outputs.
std::vector<at::Tensor> flatten_outputs(const c10::IValue& output);

} // namespace lightweight_dispatch
