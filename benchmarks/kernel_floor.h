// The kernel floor: each micro model's computation written in C++ as the same sequence of per-backend
// kernel calls its generated kernels make (at::cpu::add, at::compositeexplicitautograd::select, ...), with
// no interpreter, no stack and no dispatcher. What remains above this floor is per-op overhead.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace lightweight_dispatch::bench {

// One forward pass of a micro model: its inputs in, its outputs (flattened, in order) out.
using FloorFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

// The floor of a registered micro model (test_models/micro_*.py); throws std::out_of_range naming the
// models that have one when `model` has none.
const FloorFunction& kernel_floor(const std::string& model);

std::vector<std::string> models_with_floor();

} // namespace lightweight_dispatch::bench
