"""The eager models behind the .ptl files (Python eager runs them; the peer runtimes' files are exported from
them), and the peers' exports, made once and kept.

A peer runs the same weights on the same inputs as lite_predictor: its file is exported from the registered
eager model (seeded weights) that scripts/dump_ops.py scripted into MODEL.ptl. Exports are slow (ExecuTorch's
takes seconds per model) and the benchmark starts a server per model and thread count, so each export is kept
under a name made from the .ptl's hash and the exporter's versions: a changed model or exporter exports anew.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.latency_protocol import ATOL, expected_outputs, outputs_mismatch
from test_models import get_model  # importing it also registers the torchvision:: ops
from test_models.quantization import dequantized_scales


def eager_module(model_path: Path) -> torch.nn.Module:
    """The registered model MODEL.ptl was made from (a quantized one built, and then run, under its engine,
    as dump_ops.py exports it)."""
    spec = get_model(model_path.stem)
    if spec.qengine is not None:
        torch.backends.quantized.engine = spec.qengine
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return spec.build()


def example_tensors(model_path: Path) -> tuple[torch.Tensor, ...]:
    """The tensors among the registered model's example inputs: what a peer's file is exported for."""
    return tuple(t for t in get_model(model_path.stem).example_inputs() if isinstance(t, torch.Tensor))


def output_tolerance(model_path: Path) -> float:
    """The absolute tolerance a peer's outputs are checked with: ATOL, plus one quantization step of the
    outputs for a statically quantized model (another runtime's int8 kernels round differently)."""
    if get_model(model_path.stem).qengine is None:
        return ATOL
    try:
        return ATOL + max(dequantized_scales(eager_module(model_path), example_tensors(model_path)))
    except ValueError:  # dynamically quantized: its outputs are float
        return ATOL


def export_name(model_path: Path, exporter: str, suffix: str) -> str:
    """MODEL-<hash of the .ptl and the exporter's name and versions>.SUFFIX."""
    digest = hashlib.sha256(model_path.read_bytes())
    digest.update(exporter.encode())
    return f"{model_path.stem}-{digest.hexdigest()[:16]}{suffix}"


def cached_export(model_path: Path, cache_dir: Path, exporter: str, suffix: str,
                  export: Callable[[Path], None]) -> Path:
    """The export of MODEL.ptl under cache_dir, made by `export(path)` when it is not there yet. Written to a
    temporary name and renamed, so an export that fails or is killed leaves nothing behind to be reused."""
    path = cache_dir / export_name(model_path, exporter, suffix)
    if path.is_file():
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        export(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


@dataclass(frozen=True)
class PeerExport:
    """A peer's file of one model, the inputs to feed it, and the check of its first run's (flattened) outputs
    against the model's expected outputs."""

    path: Path
    inputs: list[torch.Tensor]
    check: Callable[[list[torch.Tensor]], str | None]


def peer_export(model_path: Path, inputs_path: Path, cache_dir: Path, exporter: str, suffix: str,
                export: Callable[[Path], None]) -> PeerExport:
    """What a peer's server needs before it loads `model_path`, all untimed: its export (cached_export), the
    tensors among the inputs, and the check."""
    path = cached_export(model_path, cache_dir, exporter, suffix, export)
    expected, atol = expected_outputs(model_path), output_tolerance(model_path)
    return PeerExport(path, [t for t in torch.load(inputs_path) if isinstance(t, torch.Tensor)],
                      lambda outputs: outputs_mismatch(outputs, expected, atol))


PREBUILT_SUFFIXES = {".onnx": "onnx", ".pte": "pte"}


def is_prebuilt(model_path: Path) -> bool:
    """A peer's own file (MODEL.onnx, MODEL.pte: benchmarks/real_models.py's) rather than a registered test
    model's MODEL.ptl to export from."""
    return model_path.suffix in PREBUILT_SUFFIXES


def prebuilt_export(model_path: Path, inputs_path: Path) -> PeerExport:
    """A file exported beforehand (benchmarks/real_models.py), loaded as it is. Its first run is checked against
    MODEL.expected.pt beside it within the tolerance manifest.json gives MODEL (ATOL without one), or against
    the reference and tolerance the manifest's peer_checks name for this kind of file (ORT's own int8 model:
    the float network's outputs)."""
    manifest_path = model_path.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    entry = manifest.get("models", {}).get(model_path.stem, {})
    check = entry.get("peer_checks", {}).get(PREBUILT_SUFFIXES[model_path.suffix])
    if check is not None:
        expected_path, atol = model_path.parent / check["expected"], float(check["atol"])
    else:
        expected_path, atol = model_path.with_name(model_path.stem + ".expected.pt"), float(entry.get("atol", ATOL))
    expected = list(torch.load(expected_path))
    return PeerExport(model_path, [t for t in torch.load(inputs_path) if isinstance(t, torch.Tensor)],
                      lambda outputs: outputs_mismatch(outputs, expected, atol))
