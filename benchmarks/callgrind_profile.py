"""Reading callgrind's output files: the total instruction count of a dump, and each function's own
(exclusive) instructions, so the benchmark can say where a mode's instructions go."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

_COMPRESSED = re.compile(r"^\((\d+)\)(?: (.*))?$")
# Which name table each specification line uses (callgrind's format: ob/cob share one, fn/cfn another, ...).
_TABLES = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl", "fn": "fn", "cfn": "fn"}


@dataclass(frozen=True)
class CallgrindDump:
    """One dump: its trigger label, total instructions (Ir), and instructions by function (self cost)."""

    path: Path
    label: str  # the text after "Client Request: ", or the whole trigger
    total: int
    self_cost: dict[str, int]  # function name -> Ir, summed over objects ("0x... [object]" when unnamed)


class CallgrindFormatError(Exception):
    """A file that is not callgrind output, with the reason."""


def _resolve(tables: dict[str, dict[str, str]], kind: str, value: str) -> str:
    match = _COMPRESSED.match(value)
    if not match:
        return value
    table = tables[_TABLES[kind]]
    number, name = match.groups()
    if name is not None:
        table[number] = name
    return table.get(number, f"(unknown {kind} {number})")


def read_dump(path: Path) -> CallgrindDump:
    """Parse a callgrind output file (events: Ir only) into its label, total and per-function self costs."""
    tables: dict[str, dict[str, str]] = {"ob": {}, "fl": {}, "fn": {}}
    self_cost: dict[str, int] = defaultdict(int)
    label, total = "", None
    obj, function = "", ""
    skip_call_cost = False
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line:
            continue
        head, _, rest = line.partition("=")
        if head in _TABLES and _:
            name = _resolve(tables, head, rest)
            if head == "ob":
                obj = Path(name).name
            elif head == "fn":
                # By name alone: the same inline function (IValue::toScalar, vector::_M_erase) compiled into
                # two objects is the same work, whichever binary runs it.
                function = f"{name} [{obj}]" if name.startswith("0x") else name
            continue
        if line.startswith("calls="):
            skip_call_cost = True  # the next cost line is the callee's inclusive cost, not ours
        elif line[0].isdigit() or line[0] in "+-*":
            if skip_call_cost:
                skip_call_cost = False
            else:
                self_cost[function] += int(line.split()[-1])
        elif line.startswith("desc: Trigger:"):
            label = line.split("Client Request:", 1)[-1].strip()
        elif line.startswith(("summary:", "totals:")) and total is None:
            total = int(line.split()[1])
    if total is None:
        raise CallgrindFormatError(f"{path}: no 'summary:' or 'totals:' line; not a callgrind output file")
    return CallgrindDump(path, label, total, dict(self_cost))


def dumps_by_label(directory: Path, pattern: str = "callgrind.out.*") -> dict[str, CallgrindDump]:
    """Every client-request dump in `directory`, by label (the program's own exit dump is skipped)."""
    dumps = {}
    for path in sorted(directory.glob(pattern)):
        dump = read_dump(path)
        if "|" in dump.label:
            dumps[dump.label] = dump
    return dumps


def per_unit_self_cost(small: CallgrindDump, large: CallgrindDump, units: float) -> dict[str, float]:
    """Each function's self instructions per unit of work between two dumps that differ by `units`."""
    names = set(small.self_cost) | set(large.self_cost)
    return {n: (large.self_cost.get(n, 0) - small.self_cost.get(n, 0)) / units for n in names}
