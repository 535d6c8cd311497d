// How messages name values: shared by reading inputs files and matching them to forward's schema.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace lightweight_dispatch {

// "a list", "an int": a value's kind as Python names it, for messages.
std::string a_kind(const c10::IValue& value);

// The elements of a list or tuple.
std::vector<c10::IValue> elements_of(const c10::IValue& value);

} // namespace lightweight_dispatch
