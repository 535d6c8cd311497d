"""Products and sums written into an operand nothing else holds (bind_time/in_place_elementwise.h).

The models here have no conv or linear, so the in-place kernels are all the stage changes: with the stage and
with --no-specialize their outputs must be the same bits, with the same strides, on input values they were not
saved with. An operand the bytecode still reads later, the caller's own input, a module constant, another dtype
or a sum with alpha != 1 into its second operand must allocate, as the stock kernels do; each of those models
computes a wrong answer if it were written into."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from predictor_runner import run_predictor
from test_bind_time_kernels import later_runs, save_frozen

C = 24


class ScaledGate(torch.nn.Module):
    """A squeeze-excitation's product: a constant per-channel scale times a fresh map (`scale * map`, as
    torchvision writes it), then a sum with a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.rand(1, C, 1, 1) + 0.5)
        self.shift = torch.nn.Parameter(torch.randn(1, C, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated = self.scale * torch.sigmoid(x)
        return gated + self.shift


class ReadAgain(torch.nn.Module):
    """The map is read again after the product: the product must not write into it."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.rand(1, C, 1, 1) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x)
        z = self.scale * y
        return z + y


class OfTheInput(torch.nn.Module):
    """The caller's own input times a scale: the caller holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.rand(1, C, 1, 1) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class ScaledSum(torch.nn.Module):
    """constant + alpha * fresh: only alpha 1 lets the sum be written into its second operand."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.shift = torch.nn.Parameter(torch.randn(1, C, 1, 1))
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.add(self.shift, torch.sigmoid(x), alpha=self.alpha)


class InDouble(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.rand(1, C, 1, 1, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.sigmoid(x.double())


def example(seed: int, channels_last: bool = False) -> torch.Tensor:
    x = torch.randn((2, C, 9, 7), generator=torch.Generator().manual_seed(seed))
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def run(predictor: Path, model: Path, inputs: Path, out: Path, *args: object) -> dict:
    expected = inputs.with_suffix(".expected.pt")
    done = run_predictor(predictor, model, "--input", inputs, "--expected", expected, "--iters", "3", "--warmup", "0",
                         "--json", "--save-outputs", out, *args)
    assert done.returncode == 0, done.stderr + done.stdout
    report = done.json()
    assert report["outputs_match"] is True, report["mismatch"]  # eager's on these values, within 1e-5
    return report


def in_place_counts(report: dict) -> tuple[int, int]:
    calls = report["in_place_calls"]
    return sum(c["in_place_calls"] for c in calls), sum(c["allocating_calls"] for c in calls)


def check_against_no_stage(predictor: Path, module: torch.nn.Module, tmp_path: Path,
                           channels_last: bool = False) -> dict:
    """The stage's run and --no-specialize's on new values: the same bits and strides, and eager's values."""
    model = save_frozen(module, [example(0)], tmp_path / "model.ptl")
    fresh = example(11, channels_last)
    torch.save([fresh], tmp_path / "fresh.pt")
    with torch.no_grad():
        expected = module(fresh)
    torch.save([expected], tmp_path / "fresh.expected.pt")
    stage = run(predictor, model, tmp_path / "fresh.pt", tmp_path / "on.pt")
    plain = run(predictor, model, tmp_path / "fresh.pt", tmp_path / "off.pt", "--no-specialize")
    on, off = torch.load(tmp_path / "on.pt"), torch.load(tmp_path / "off.pt")
    assert on.dtype == off.dtype and on.stride() == off.stride() == expected.stride()
    assert torch.equal(on.view(torch.int32 if on.dtype == torch.float32 else torch.int64),
                       off.view(torch.int32 if off.dtype == torch.float32 else torch.int64))
    torch.testing.assert_close(on, expected, rtol=1e-6, atol=1e-6)
    assert plain["in_place_calls"] == []
    return stage


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_product_and_a_sum_of_fresh_maps_are_written_in_place(
    channels_last: bool, predictor: Path, tmp_path: Path
) -> None:
    report = check_against_no_stage(predictor, ScaledGate(), tmp_path, channels_last)
    runs = 1 + 3  # the first run and --iters 3
    assert sorted(c["op"] for c in report["in_place_calls"]) == ["aten::add.Tensor", "aten::mul.Tensor"]
    assert in_place_counts(report) == (2 * runs, 0)
    assert {site["runs"] for site in report["call_sites"] if site["op"] in ("aten::mul.Tensor", "aten::add.Tensor")} \
        == {"static+in_place"}


def test_a_map_read_again_is_not_written_into(predictor: Path, tmp_path: Path) -> None:
    report = check_against_no_stage(predictor, ReadAgain(), tmp_path)
    by_op = {c["op"]: c for c in report["in_place_calls"]}
    # The product allocates (the map is read by the sum); the sum writes into the product, which dies there.
    assert by_op["aten::mul.Tensor"]["in_place_calls"] == 0 and by_op["aten::mul.Tensor"]["allocating_calls"] == 4
    assert by_op["aten::add.Tensor"]["in_place_calls"] == 4


def test_the_callers_input_is_never_written_into(predictor: Path, tmp_path: Path) -> None:
    report = check_against_no_stage(predictor, OfTheInput(), tmp_path)
    assert in_place_counts(report) == (0, 4)
    assert torch.equal(torch.load(tmp_path / "fresh.pt")[0], example(11))


@pytest.mark.parametrize("alpha, in_place", [(1.0, 4), (2.0, 0)])
def test_a_sum_is_written_into_its_second_operand_only_with_alpha_one(
    alpha: float, in_place: int, predictor: Path, tmp_path: Path
) -> None:
    report = check_against_no_stage(predictor, ScaledSum(alpha), tmp_path)
    assert in_place_counts(report) == (in_place, 4 - in_place)


def test_another_dtype_allocates(predictor: Path, tmp_path: Path) -> None:
    report = check_against_no_stage(predictor, InDouble(), tmp_path)
    assert in_place_counts(report) == (0, 4)


class ConvBesideAGate(torch.nn.Module):
    """A conv (a call site, so the stage prepares in a background run) beside a squeeze-excitation's product."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(C, 8, 3, padding=1)
        self.scale = torch.nn.Parameter(torch.rand(1, C, 1, 1) + 0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.conv(x), self.scale * torch.sigmoid(x)


@pytest.mark.parametrize("prepare", ["background", "first-call"])
def test_the_check_of_a_new_shape_waits_for_the_preparation_run(
    prepare: str, predictor: Path, tmp_path: Path
) -> None:
    # With a background preparation run to follow, the caller's first call of a shape allocates as the stock kernel
    # does and leaves the check (both kernels, every bit compared) to that run; the calls after it are in place.
    # Preparing on first calls, the first call checks and is in place. Either way the same bits as without the stage.
    module = ConvBesideAGate().eval()
    model = save_frozen(module, [example(0)], tmp_path / "model.ptl")
    fresh = example(5)
    torch.save([fresh], tmp_path / "fresh.pt")
    with torch.no_grad():
        torch.save(list(module(fresh)), tmp_path / "fresh.expected.pt")
    report = run(predictor, model, tmp_path / "fresh.pt", tmp_path / "on.pt", "--prepare", prepare)
    run(predictor, model, tmp_path / "fresh.pt", tmp_path / "off.pt", "--no-specialize")
    # The product bit for bit (the conv's compiled kernel is within 1e-5 of eager's: run() checked that).
    on, off = torch.load(tmp_path / "on.pt")[1], torch.load(tmp_path / "off.pt")[1]
    assert on.stride() == off.stride() and torch.equal(on.view(torch.int32), off.view(torch.int32))
    (product,) = report["in_place_calls"]
    callers_runs = 1 + later_runs(report)
    if prepare == "background":
        assert report["background_preparation"]["runs"] == 1
        assert (product["in_place_calls"], product["allocating_calls"]) == (callers_runs - 1, 1), product
    else:
        assert report["background_preparation"]["runs"] == 0
        assert (product["in_place_calls"], product["allocating_calls"]) == (callers_runs, 0), product


def test_the_text_report_counts_the_calls_written_in_place(predictor: Path, tmp_path: Path) -> None:
    model = save_frozen(ScaledGate(), [example(0)], tmp_path / "model.ptl")
    done = run_predictor(predictor, model, "--iters", "2", "--warmup", "0")
    assert done.returncode == 0, done.stderr
    assert ("bind-time: 1 mul.Tensor call site(s) write into an operand nothing else holds (the same values, no "
            "result to allocate): 3 call(s) in place, 0 allocating as the stock kernels do") in done.stdout


def test_the_generator_adds_the_in_place_overloads_the_stage_calls(tmp_path: Path) -> None:
    import subprocess
    import sys

    selection = tmp_path / "ops.yaml"
    selection.write_text("operators:\n"
                         "  aten::mul.Tensor: {is_root_operator: true, is_used_for_training: false, "
                         "include_all_overloads: false, debug_info: [gate]}\n"
                         "  aten::sigmoid: {is_root_operator: true, is_used_for_training: false, "
                         "include_all_overloads: false, debug_info: [gate]}\n")
    out = tmp_path / "generated"
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "tools.gen_unboxing", "--op-selection-yaml-path", str(selection),
                           "--install-dir", str(out)], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "1 for the bind-time stage" in done.stdout
    report = json.loads((out / "codegen_report.json").read_text())
    assert report["stage_companions"] == [{"name": "aten::mul_.Tensor", "serves": "aten::mul.Tensor"}]
    assert report["selected"] == 2
    assert '"aten::mul_.Tensor"' in (out / "KernelTable.cpp").read_text()
