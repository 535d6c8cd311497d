// Checks on a loaded model that LibTorch does not make: a tensor whose storage is shorter than its
// sizes and strides claim (a truncated record in a damaged archive) would read out of bounds later.
#pragma once

#include <torch/csrc/jit/mobile/module.h>

#include <stdexcept>

namespace lightweight_dispatch {

class ModelIntegrityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every tensor reachable from the module's attributes and its functions' constants must lie inside
// its storage. Throws ModelIntegrityError describing the first that does not.
void check_loaded_tensors(const torch::jit::mobile::Module& module);

} // namespace lightweight_dispatch
