"""The public C++ API (include/lightweight_dispatch/runtime.h) exercised from C++ alone by build/api_check:
concurrent forward bit for bit, concurrent first calls preparing each bind-time site once, one error listing
every missing operator, a damaged file as an exception, bad inputs as an exception rather than a crash, and a
submodule's method (a __setstate__ the loader ran) neither listed nor run as the model's, and a method given the
frozen program of another with the same bytecode computing what that one computes."""
from __future__ import annotations

import subprocess
from pathlib import Path

import torch

from predictor_runner import save_lite_model
from test_attribute_freezing import ForwardsToAnImplementation, HoldsAStatefulBlock

REPO_ROOT = Path(__file__).resolve().parent.parent


class UsesErf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.erf(x) + torch.special.expm1(x)


class ReturnsFolded(torch.nn.Module):
    """Returns a tensor made from x's shape alone: the bind-time stage folds it."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2.0, torch.arange(x.size(1)) * 2.0


def test_the_api_from_cpp(models_dir: Path, tmp_path: Path) -> None:
    missing = save_lite_model(UsesErf(), tmp_path / "uses_erf.ptl")
    returns_folded = save_lite_model(ReturnsFolded(), tmp_path / "returns_folded.ptl")
    submodule_method = save_lite_model(HoldsAStatefulBlock(), tmp_path / "submodule_method.ptl")
    torch.manual_seed(3)
    forwards = save_lite_model(ForwardsToAnImplementation().eval(), tmp_path / "forwards_to_an_implementation.ptl")
    damaged = tmp_path / "truncated.ptl"
    good = models_dir / "ssdlite_head.ptl"
    damaged.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    result = subprocess.run(
        [str(REPO_ROOT / "build" / "api_check"), str(good), str(models_dir / "ssdlite_head.inputs.pt"),
         str(missing), str(damaged), str(returns_folded), str(submodule_method), str(forwards)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "api_check: 28 passed, 0 failed"
    assert "ok   forward and _forward_impl are frozen once: 2 method(s), 1 sharing" in lines
    assert any(line.startswith("ok   running a submodule's method is a RunError: ") for line in lines)
    assert "ok   4 threads x 5 concurrent forward calls are bit-identical to one thread: 0 differed" in lines
    assert "ok   MissingOperatorsError lists every missing operator: 2 listed" in lines
    assert any(line.startswith("ok   each specialised site was prepared exactly once for the one shape: ") for line in lines)
    assert any(line.startswith("ok   a damaged file is a ModelLoadError naming it: " + str(damaged)) for line in lines)
