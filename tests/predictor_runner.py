"""Running lite_predictor from tests and reading what it reports."""
from __future__ import annotations

import io
import json
import os
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


# The test-only hook that keeps every compiled kernel passing the checks (and every max_pool2d run channels_last)
# untimed (bind_time/test_hooks.h; set for every test: conftest.py).
NO_RACE_HOOK = "LIGHTWEIGHT_DISPATCH_TEST_ONLY_NO_RACE"


# The test-only hook that gives the model check its verdict (bind_time/model_check.h; tests/test_model_check.py).
MODEL_CHECK_HOOK = "LIGHTWEIGHT_DISPATCH_TEST_ONLY_MODEL_CHECK"


def race_on_environment() -> dict[str, str]:
    """This process's environment without the no-race hook: the stage races every compiled kernel, as users run it.
    The model check that follows the races keeps what they chose (its hook says so): on a test's tiny models whole
    runs time within noise of each other, and a test of the races must see what the races chose."""
    environment = {name: value for name, value in os.environ.items() if name != NO_RACE_HOOK}
    return environment | {MODEL_CHECK_HOOK: "with_compiled"}


def run_predictor(
    predictor: Path, *args: object, timeout: float = 300, env: dict[str, str] | None = None
) -> PredictorRun:
    """lite_predictor with `args`, in `env` (default: this process's environment)."""
    completed = subprocess.run(
        [str(predictor), *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False, env=env
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
