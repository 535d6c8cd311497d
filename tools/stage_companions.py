"""Kernels the bind-time stage calls instead of a selected operator, generated beside it.

The stage runs a selected out-of-place elementwise operator in place, writing into an operand that nothing else
holds at that call (bind_time/in_place_elementwise.h): the same values, without a fresh result to allocate and
fill. It needs the operator's in-place overload, which a model rarely calls itself; the generator adds that
overload for every selected operator below, and the codegen report lists each addition with the operator it
serves. Nothing is added for an operator that is not selected.
"""
from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

# Selected operator -> its in-place overload (the same elementwise function, written into `self`).
IN_PLACE_OVERLOADS: dict[str, str] = {
    "aten::add.Tensor": "aten::add_.Tensor",
    "aten::mul.Tensor": "aten::mul_.Tensor",
}


@dataclass(frozen=True)
class Companion:
    name: str  # the kernel added: "aten::mul_.Tensor"
    serves: str  # the selected operator the stage calls it for: "aten::mul.Tensor"


def stage_companions(selected: frozenset[str], catalog: Container[str]) -> tuple[Companion, ...]:
    """The in-place overloads of the selected operators that the selection lacks and the catalog has."""
    return tuple(
        Companion(in_place, op)
        for op, in_place in sorted(IN_PLACE_OVERLOADS.items())
        if op in selected and in_place not in selected and in_place in catalog
    )
