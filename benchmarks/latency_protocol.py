"""The line protocol of the latency servers, and the loop that serves it for the Python-hosted ones.

benchmarks/latency.py drives every mode through a child process that speaks it (bench_latency_server in C++,
latency_server.cpp, speaks it too):

    load KEY MODE MODEL.ptl INPUTS.pt   -> "ok LOAD_MS"   (what counts as loading is the mode's own)
    run KEY                             -> "ok MS"        (one forward pass on the inputs, timed by the server)
    quit

Any failure replies "error TYPE: MESSAGE" (its first line) and the server keeps serving. A mode may check the
outputs of a key's first run against the model's expected outputs (the peers do: their exports could compute
something else; so does bench_latency_server, against MODEL.expected.pt); a mismatch is an error reply, and the key
is dropped.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, TextIO

import torch

# Peers against the model's expected outputs (eager PyTorch's): |got - expected| <= ATOL + RTOL * |expected|.
ATOL = RTOL = 1e-4


@dataclass(frozen=True)
class Loaded:
    """A model as one mode holds it: its load time, one forward pass, and what its first run is checked by."""

    load_ms: float
    run: Callable[[], object]  # one forward pass; returns the outputs
    # The first run's outputs -> why they are wrong, or None when right. Not timed. None: not checked.
    check: Callable[[object], str | None] | None = None
    # Entered around every timed run, outside the timer (Python's modes: torch.inference_mode).
    context: Callable[[], ContextManager] = contextlib.nullcontext


class OutputMismatch(Exception):
    """A mode's first outputs differ from the model's expected outputs."""


def first_line(error: BaseException) -> str:
    """An exception's first line, and the line naming its cause where there is one (torch.export puts the
    model's source line on a `Caused by:` line of its own)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    cause = next((line for line in lines[1:] if line.startswith("Caused by:")), None)
    return lines[0] + (f" {cause}" if cause else "")


def serve(lines: Iterable[str], load: Callable[[str, Path, Path], Loaded], usage: str,
          out: TextIO | None = None) -> None:
    """Answer `lines` until quit or their end. `load(mode, model, inputs)` loads a model for one mode (and
    raises, with the reason, when that mode cannot run it); `usage` names the commands and modes accepted."""
    out = out or sys.stdout
    loaded: dict[str, Loaded] = {}
    unchecked: set[str] = set()
    for line in lines:
        words = line.split()
        if not words or words[0] == "quit":
            break
        try:
            if words[0] == "load" and len(words) == 5:
                key = words[1]
                loaded.pop(key, None)
                loaded[key] = load(words[2], Path(words[3]), Path(words[4]))
                unchecked.add(key)
                reply = loaded[key].load_ms
            elif words[0] == "run" and len(words) == 2:
                key = words[1]
                model = loaded[key]
                with model.context():
                    start = time.perf_counter()
                    outputs = model.run()
                    reply = (time.perf_counter() - start) * 1e3
                if key in unchecked:
                    unchecked.discard(key)
                    problem = model.check(outputs) if model.check is not None else None
                    if problem is not None:
                        del loaded[key]
                        raise OutputMismatch(problem)
            else:
                raise ValueError(f"bad command {line.strip()!r} ({usage})")
            print(f"ok {reply:.6f}", file=out, flush=True)
        except Exception as error:  # reported to the client, which records the mode as failed
            print(f"error {type(error).__name__}: {first_line(error)[:400]}", file=out, flush=True)


def expected_outputs(model_path: Path) -> list[torch.Tensor]:
    """MODEL.expected.pt beside MODEL.ptl (scripts/dump_ops.py writes it): eager PyTorch's outputs, flattened."""
    return list(torch.load(model_path.with_name(model_path.stem + ".expected.pt")))


def outputs_mismatch(outputs: list[torch.Tensor], expected: list[torch.Tensor], atol: float = ATOL,
                     rtol: float = RTOL) -> str | None:
    """Why flattened outputs differ from the expected ones (count, shape, values beyond atol + rtol * |e|), or
    None when they agree."""
    if len(outputs) != len(expected):
        return f"{len(outputs)} output tensor(s), the model's expected outputs have {len(expected)}"
    for index, (got, want) in enumerate(zip(outputs, expected)):
        if tuple(got.shape) != tuple(want.shape):
            return f"output {index} has shape {list(got.shape)}, expected {list(want.shape)}"
        if want.numel() == 0:
            continue
        got, want = got.double(), want.double()
        excess = (got - want).abs() - (atol + rtol * want.abs())
        if not bool((excess <= 0).all()):
            worst = int(excess.flatten().argmax())
            return (f"output {index} differs beyond {atol:g} + {rtol:g} x |expected| (max abs diff "
                    f"{(got - want).abs().max().item():.3g}, at flat index {worst}: {got.flatten()[worst].item():.6g} "
                    f"vs {want.flatten()[worst].item():.6g})")
    return None


@contextlib.contextmanager
def output_discarded() -> Iterator[None]:
    """Exporters print a lot (the ONNX exporter the whole graph, hundreds of kB, when it fails; torch.export
    and ExecuTorch their warnings) on stdout, which is the protocol's channel, and stderr, a pipe the benchmark
    reads only when the server dies, so a full one would block the server. Both go to /dev/null here, Python's
    and C++'s alike; an exception's message is what the benchmark reports."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
        os.dup2(devnull.fileno(), 2)
        try:
            with contextlib.redirect_stdout(devnull), contextlib.redirect_stderr(devnull):
                yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
