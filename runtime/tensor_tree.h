// The tensors in a value a model returns, through tuples, lists and dicts.
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <vector>

namespace lightweight_dispatch {

// `value` with every tensor in it replaced by `change(tensor)`. Containers holding one are rebuilt (a returned
// list or dict may be the model's own); the rest is `value` itself.
c10::IValue map_tensors(c10::IValue value, const std::function<at::Tensor(const at::Tensor&)>& change);

// Calls `visit` on every tensor in `value`.
void for_each_tensor(const c10::IValue& value, const std::function<void(const at::Tensor&)>& visit);

// A deep copy of each of `values`: a run may change the copies in place without touching the originals.
std::vector<c10::IValue> deep_copies(const std::vector<c10::IValue>& values);

} // namespace lightweight_dispatch
