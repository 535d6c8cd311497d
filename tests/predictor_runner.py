"""Running lite_predictor from tests and reading what it reports."""
from __future__ import annotations

import io
import json
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class PredictorRun:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        return json.loads(self.stdout)


def run_predictor(predictor: Path, *args: object, timeout: float = 300) -> PredictorRun:
    completed = subprocess.run(
        [str(predictor), *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False
    )
    return PredictorRun(completed.returncode, completed.stdout, completed.stderr)


def save_lite_model(module: torch.nn.Module, path: Path) -> Path:
    """Script `module` and save it for the lite interpreter at `path`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(module)
        path.write_bytes(scripted._save_to_buffer_for_lite_interpreter())
    return path


def lite_module_ops(path: Path) -> set[str]:
    from torch.jit.mobile import _export_operator_list, _load_for_lite_interpreter

    return set(_export_operator_list(_load_for_lite_interpreter(io.BytesIO(path.read_bytes()))))
