"""The bind-time stage never changes an answer: what it may assume about an operator comes from the operator's
registration (bind_time/operator_facts.h), each rewrite is made only where the bytecode proves it safe, compiled
kernels are checked on probe inputs of the stage's own, and what runs hand out is never shared.

Each test here fails without the rule it names: a model that breaks the rule is run with the stage, and its
outputs or report are compared with the stock kernels' (--no-specialize) or eager PyTorch's."""
from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

from predictor_runner import PredictorRun, run_predictor, save_lite_model
from scripts.dump_ops import flatten_outputs
from test_bind_time_kernels import later_runs, save_frozen

RANDOM_OPERATORS = {
    "aten::rand", "aten::randn", "aten::randint", "aten::randperm", "aten::rand_like", "aten::randn_like",
    "aten::normal", "aten::bernoulli", "aten::multinomial", "aten::dropout", "aten::uniform_", "aten::normal_",
    "aten::exponential_",
}


def run_json(predictor: Path, model: Path, *args: object) -> tuple[PredictorRun, dict]:
    run = run_predictor(predictor, model, "--iters", "3", "--warmup", "0", "--json", *args)
    assert run.stdout, run.stderr
    return run, run.json()


def save_inputs(path: Path, *inputs: torch.Tensor) -> Path:
    torch.save(list(inputs), path)
    return path


# --- 1. nondeterminism comes from the operator's registration, not from a name list

class AddsNoise(torch.nn.Module):
    """The issue's model: the noise's shape is the input's, fixed at a given shape, so the old stage folded it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn(x.shape)


@pytest.mark.parametrize("stage", ["on", "off"])
def test_a_model_that_adds_noise_returns_fresh_noise_on_every_run(stage: str, predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(AddsNoise(), tmp_path / "noise.ptl")
    inputs = save_inputs(tmp_path / "zeros.pt", torch.zeros(4, 5))
    flags = ["--no-specialize"] if stage == "off" else []
    run, report = run_json(predictor, model, "--input", inputs, "--parallel", "2", *flags)
    assert report["folded_calls"] == []
    # Every --parallel run is compared with the first run's outputs: fresh noise differs from it every time.
    assert report["parallel"]["outputs_identical"] is False
    assert run.returncode == 6  # as documented for --parallel runs that differ


def test_no_random_operator_is_ever_folded(predictor: Path, models_dir: Path) -> None:
    # random_draws calls each at a shape fixed by its input's: all their arguments are fixed values.
    run, report = run_json(predictor, models_dir / "random_draws.ptl")
    assert run.returncode == 0, run.stderr
    called = {op["name"].split(".")[0] for op in report["ops"]}
    assert RANDOM_OPERATORS <= called
    folded = {call["op"].split(".")[0] for call in report["folded_calls"]}
    assert not folded & RANDOM_OPERATORS, folded


class ConvThen(torch.nn.Module):
    """A frozen conv (a site to prepare) followed by `then`, which a hidden second run would repeat."""

    def __init__(self, then: str) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.then = then

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        if self.then == "noise":
            y = y + torch.rand_like(y)
        elif self.then == "warn":
            warnings.warn("lightweight_dispatch test warning")
        return y


@pytest.mark.parametrize(("then", "because"), [
    ("noise", "it calls aten::rand_like, which is tagged nondeterministic_seeded"),
    ("warn", "it warns (warnings.warn)"),
])
def test_a_model_a_hidden_run_would_change_prepares_on_first_calls(
    then: str, because: str, predictor: Path, tmp_path: Path
) -> None:
    x = torch.randn(1, 3, 12, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = save_frozen(ConvThen(then), [x], tmp_path / f"{then}.ptl")
    run, report = run_json(predictor, model)
    assert run.returncode in (0, 1), run.stderr  # (noise: outputs differ from eager's draw)
    background = report["background_preparation"]
    assert background["runs"] == 0
    assert background["first_call_because"].startswith(because), background
    (site,) = report["specialized_sites"]
    assert site["specialized_calls"] + site["generated_calls"] == 4  # prepared on the first of its 4 runs
    if then == "warn":
        # One warning per run the caller made (the first, 3 timed ones), none from a hidden run.
        assert run.stderr.count("lightweight_dispatch test warning") == 4, run.stderr


class LinearThenAttention(torch.nn.Module):
    """A frozen linear (a site to prepare), then attention, tagged nondeterministic_seeded, whose draws depend on
    its dropout_p: a constant of the saved model, given or left to its default."""

    def __init__(self, dropout_p: float | None) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.dropout_p = dropout_p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if self.dropout_p is None:
            return torch.nn.functional.scaled_dot_product_attention(y, y, y)
        return torch.nn.functional.scaled_dot_product_attention(y, y, y, dropout_p=self.dropout_p, is_causal=True)


@pytest.mark.parametrize("mask", ["none", "causal", "boolean"])
def test_attention_at_dropout_0_really_draws_nothing(mask: str) -> None:
    """The fact operator_facts.h's draws_nothing_when rests on, on the installed torch: at dropout_p 0.0 attention
    leaves the global generator where it was (on every path its CPU kernel takes); at another value it moves it."""
    x = torch.randn(1, 4, 8, 16)
    masks = {"none": {}, "causal": {"is_causal": True}, "boolean": {"attn_mask": torch.rand(8, 8) > 0.3}}
    for value, moves in ((0.0, False), (0.25, True)):
        before = torch.get_rng_state()
        torch.nn.functional.scaled_dot_product_attention(x, x, x, dropout_p=value, **masks[mask])
        assert torch.equal(before, torch.get_rng_state()) is not moves, (mask, value)


@pytest.mark.parametrize("value", [None, 0.0, 0.25])
def test_attention_that_draws_nothing_here_prepares_in_the_background(
    value: float | None, predictor: Path, tmp_path: Path
) -> None:
    torch.manual_seed(11)
    x = torch.randn(1, 2, 8, 16)
    module = LinearThenAttention(value).eval()
    model = save_frozen(module, [x], tmp_path / "attention.ptl")
    run, report = run_json(predictor, model)
    background = report["background_preparation"]
    (site,) = report["specialized_sites"]
    if value is None or value == 0.0:
        assert run.returncode == 0, run.stderr + str(report.get("mismatch"))  # eager's outputs (no draw)
        assert background["first_call_because"] == "", background
        assert background["runs"] == 1, background
    else:
        assert run.returncode in (0, 1), run.stderr  # the draws differ from eager's
        assert background["runs"] == 0, background
        assert background["first_call_because"].startswith(
            "it calls aten::scaled_dot_product_attention, which is tagged nondeterministic_seeded"), background
        assert site["specialized_calls"] + site["generated_calls"] == 4  # prepared on the first of its 4 runs


# --- 2. a rewrite only where the bytecode proves no write can reach what it changes

def saved_outputs(path: Path) -> list[torch.Tensor]:
    return flatten_outputs(torch.load(path))


def assert_stage_agrees(predictor: Path, model: Path, tmp_path: Path, *args: object) -> dict:
    """Runs `model` with the stage and without (outputs of a later run saved) and returns the stage's report
    after checking both against eager (NAME.expected.pt) and each other, within 1e-5."""
    reports = {}
    for stage, flags in (("on", []), ("off", ["--no-specialize"])):
        run, reports[stage] = run_json(predictor, model, "--save-outputs", tmp_path / f"{stage}.pt", *flags, *args)
        assert run.returncode == 0, run.stderr + str(reports[stage].get("mismatch"))
    for on, off in zip(saved_outputs(tmp_path / "on.pt"), saved_outputs(tmp_path / "off.pt"), strict=True):
        torch.testing.assert_close(on, off, rtol=1e-5, atol=1e-5)
    return reports["on"]


class WritesThePairsInput(torch.nn.Module):
    """A 1x1 conv feeding a depthwise conv, its input written in place between the two calls: run as one kernel
    at the depthwise conv's call, the pair would read the written input."""

    def __init__(self) -> None:
        super().__init__()
        self.pointwise = torch.nn.Conv2d(8, 16, 1)
        self.depthwise = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = x + 0.0
        y = self.pointwise(z)
        z.mul_(2.0)
        return self.depthwise(y), z


def test_a_pair_whose_input_is_written_in_between_runs_as_two_kernels(predictor: Path, tmp_path: Path) -> None:
    model = save_frozen(WritesThePairsInput(), [torch.randn(1, 8, 10, 10)], tmp_path / "pair.ptl")
    report = assert_stage_agrees(predictor, model, tmp_path)
    runs = [site["runs"] for site in report["specialized_sites"]]
    assert runs == ["static+onednn(conv2d)", "static+onednn(conv2d)"], runs
    note = report["specialized_sites"][0]["notes"][0]
    assert note.startswith("not run in one kernel with the depthwise conv at instruction "), note
    assert "(aten::mul_.Scalar) may write its arguments" in note, note


class WritesThroughAReshape(torch.nn.Module):
    """A conv result read by another conv after a write through its reshape: in the stock layout the reshape is a
    view, so the write reaches the second conv's input; of a channels_last result it would be a copy."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.second = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = self.first(x)
        flat = r.reshape(-1)
        flat.add_(1.0)
        return self.second(r)


def test_a_write_through_a_reshape_reaches_the_next_site(predictor: Path, tmp_path: Path) -> None:
    model = save_frozen(WritesThroughAReshape(), [torch.randn(1, 3, 12, 12)], tmp_path / "reshape.ptl")
    report = assert_stage_agrees(predictor, model, tmp_path)
    first = report["specialized_sites"][0]
    assert first["result_layout"] != "channels_last", first


class WritesThroughACopiedList(torch.nn.Module):
    """A fixed value (folded: it depends on the input's shape only) put in a list, the list copied (aten::list,
    whose schema declares no alias), and an element of the copy written: that writes the fixed value."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = torch.arange(x.size(1)) * 1.0
        copied = list([grid, x])
        copied[0].add_(1.0)
        return x + grid


def test_a_write_through_a_list_copy_folds_nothing(predictor: Path, tmp_path: Path) -> None:
    x = torch.zeros(1, 4)
    model = save_lite_model(WritesThroughACopiedList(), tmp_path / "list.ptl")
    torch.save([x], model.with_suffix(".inputs.pt"))
    torch.save([WritesThroughACopiedList()(x)], model.with_suffix(".expected.pt"))
    run, report = run_json(predictor, model)
    assert run.returncode == 0, report.get("mismatch")  # the 4th run's outputs, as the 1st's: no accumulation
    assert report["folded_calls"] == []


# --- 3. a compiled kernel is checked on a probe input of the stage's own before it serves a call

class OneConv(torch.nn.Module):
    """17.7M multiply-adds at 1x16x64x64."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def run_with_wrong_weights(predictor: Path, model: Path, *args: object) -> tuple[PredictorRun, dict]:
    """lite_predictor with the test-only hook that compiles every partition with its first weight doubled."""
    environment = dict(os.environ, LIGHTWEIGHT_DISPATCH_TEST_ONLY_WRONG_WEIGHTS="1")
    completed = subprocess.run([str(predictor), str(model), "--iters", "3", "--warmup", "0", "--json",
                                *map(str, args)], capture_output=True, text=True, timeout=300, env=environment)
    run = PredictorRun(completed.returncode, completed.stdout, completed.stderr)
    return run, run.json()


@pytest.mark.parametrize("prepare", ["background", "first-call"])
def test_a_wrong_kernel_is_caught_even_when_the_first_input_hides_it(
    prepare: str, predictor: Path, tmp_path: Path
) -> None:
    # All zeros: the conv's result is its bias whatever the weight, so a check on this input alone would pass.
    zeros = torch.zeros(1, 16, 64, 64)
    model = save_frozen(OneConv(), [zeros], tmp_path / "conv.ptl")
    run, report = run_with_wrong_weights(predictor, model, "--prepare", prepare)
    assert run.returncode == 0, run.stderr  # the generated kernels served every call
    (site,) = report["specialized_sites"]
    assert site["specialized_calls"] == 0 and site["generated_calls"] == 1 + later_runs(report), site
    (note,) = site["notes"]
    assert note.endswith("its result on a probe input (seeded random values at this shape) differed from the "
                         "generated kernels' beyond 1e-5"), note
    # Without the hook the same site compiles, checks and serves the later calls.
    run, report = run_json(predictor, model, "--prepare", prepare)
    assert run.returncode == 0, run.stderr
    (site,) = report["specialized_sites"]
    assert site["notes"] == [] and site["specialized_calls"] == later_runs(report), site


# --- 4. concurrent runs never share what they return

class ReturnsAFoldedValue(torch.nn.Module):
    """A folded value (per input shape) returned as it is, after enough work that other runs, at another shape,
    replace the folded call's remembered result meanwhile."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grid = torch.arange(x.size(1)) * 0.5
        y = torch.sigmoid(x)
        for _ in range(4):
            y = torch.sigmoid(y * 2.0 + 1.0)
        return y + grid, grid


def test_concurrent_runs_at_two_shapes_never_share_a_folded_result(tmp_path: Path) -> None:
    program = Path(__file__).resolve().parent.parent / "build" / "stage_race_check"
    model = save_lite_model(ReturnsAFoldedValue(), tmp_path / "folded.ptl")
    first = save_inputs(tmp_path / "a.pt", torch.randn(64, 32))
    second = save_inputs(tmp_path / "b.pt", torch.randn(64, 48))
    done = subprocess.run([str(program), str(model), str(first), str(second), "300"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "stage_race_check: ok"
    assert "folded calls reused" in done.stdout and " 0 folded calls" not in done.stdout, done.stdout
