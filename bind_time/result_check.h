// The check every kernel the stage substitutes passes before it serves a call: its result against the stock
// path's, within one tolerance, on the call's own tensors and on a probe input of the stage's own.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace lightweight_dispatch {

// max |got - expected| <= 1e-5 + 1e-5 max |expected|, and finite; computed in `expected`'s own memory, which it
// overwrites (four passes and no new buffer: at::allclose makes six passes and four result-sized temporaries,
// whose fresh pages cost most of the check on a first run).
bool agrees_within_tolerance(const at::Tensor& got, at::Tensor& expected);

// Seeded uniform values in [-2, 2) in a new tensor of `like`'s sizes, strides and dtype (the same values at every call with
// the same `stream`; another stream for a second probe tensor): a caller's first input can hide a wrong kernel
// (zeros make a conv's result its bias alone, whatever the weight).
at::Tensor probe_like(const at::Tensor& like, uint64_t stream = 0);

} // namespace lightweight_dispatch
