"""Which operator names exist, and of which kind each is.

Four kinds: native functions (native_functions.yaml), the project's custom operators (custom_ops.yaml),
dispatcher operators registered outside native_functions.yaml (`quantized::*`, declared for the generator
in quantized_ops.yaml), and JIT-native operators, which only the TorchScript runtime implements
(aten::size, prim::*). The last two are both in the JIT registry; only the third is in the c10 dispatcher.
Also used to reject a misspelt operator in an ops yaml with the names it was probably meant to be.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from tools.custom_ops import load_custom_ops
from tools.jit_ops import dispatcher_has_operator, jit_operator_names
from tools.native_ops import NativeCatalog


@dataclass(frozen=True)
class KnownOps:
    native: frozenset[str]
    jit: frozenset[str]  # every JIT-registered operator, native ones included
    custom: frozenset[str] = frozenset()

    def exists(self, name: str) -> bool:
        return name in self.native or name in self.jit or name in self.custom

    def is_non_native_dispatcher_op(self, name: str) -> bool:
        """A c10 dispatcher operator outside native_functions.yaml (quantized::add): it needs a generated kernel."""
        return (
            name in self.jit and name not in self.native and name not in self.custom and dispatcher_has_operator(name)
        )

    def is_jit_native(self, name: str) -> bool:
        """Implemented by the interpreter itself: no kernel to generate."""
        return (
            name in self.jit
            and name not in self.native
            and name not in self.custom
            and not dispatcher_has_operator(name)
        )

    def close_matches(self, name: str, limit: int = 3) -> list[str]:
        return difflib.get_close_matches(name, sorted(self.native | self.jit | self.custom), n=limit, cutoff=0.75)


def known_ops(catalog: NativeCatalog, custom: frozenset[str] | None = None) -> KnownOps:
    """Native, JIT and custom operators; custom ones default to custom_ops.yaml's."""
    custom_names = frozenset(load_custom_ops()) if custom is None else custom
    return KnownOps(frozenset(catalog.ops), jit_operator_names(), custom_names)


def unknown_op_message(name: str, known: KnownOps, source: str) -> str:
    suggestions = known.close_matches(name)
    hint = f"; did you mean {' or '.join(suggestions)}?" if suggestions else ""
    return f"{source}: {name} is not an operator of the installed torch{hint}"
