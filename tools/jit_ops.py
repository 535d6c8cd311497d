"""Operators the TorchScript runtime implements itself (aten::size, aten::__getitem__.t, prim::*).

They are not in native_functions.yaml and not dispatched through c10; the lite interpreter keeps its
own implementation of them, so the generator recognises them and generates nothing.
"""
from __future__ import annotations

from functools import lru_cache


def schema_op_name(schema_name: str, overload: str) -> str:
    return f"{schema_name}.{overload}" if overload else schema_name


@lru_cache(maxsize=1)
def jit_operator_names() -> frozenset[str]:
    """Every operator registered with the JIT of the installed torch (native ones included)."""
    import torch  # imported lazily: it takes seconds, and only selections with JIT ops need it

    return frozenset(schema_op_name(s.name, s.overload_name) for s in torch._C._jit_get_all_schemas())



def dispatcher_has_operator(op_name: str) -> bool:
    """Whether the c10 dispatcher of the installed torch has `namespace::name.overload` (native or not).

    Tells a dispatcher operator registered outside native_functions.yaml (quantized::add) from a JIT-native
    one (aten::size): both are in the JIT registry, only the first in the dispatcher.
    """
    import torch

    name, _, overload = op_name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(name, overload)
    except RuntimeError:
        return False
    return True
