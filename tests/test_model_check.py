"""The model check (bind_time/model_check.h): once a caller's runs on some inputs have settled, the stage times
whole runs of the model with its compiled kernels against runs with every site on its generated kernels, and keeps
the compiled kernels for such inputs only where the runs with them were faster. The verdicts are taken on the
machine's timings; these tests give the check its verdict through a test hook, so that they see what each verdict
does whichever side this machine favours, and check the rule itself on made-up timings (tests/cpp/model_check_check.cpp)."""
from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

from predictor_runner import MODEL_CHECK_HOOK, race_on_environment, run_predictor, save_lite_model
from test_bind_time_kernels import CountsItsCalls, ResidualMlp, _save_inputs, save_frozen

GENERATED_WINS_HOOK = "LIGHTWEIGHT_DISPATCH_TEST_ONLY_GENERATED_WINS"
BUILD = Path(__file__).resolve().parent.parent / "build"


def mlp(tmp_path: Path) -> Path:
    torch.manual_seed(3)
    return save_frozen(ResidualMlp(), [torch.randn(64, 512)], tmp_path / "mlp.ptl")


class TwoConvs(torch.nn.Module):
    """conv -> relu -> conv -> relu: the first site's result only feeds the second, so the stage makes it
    channels_last; without the compiled kernels it must be contiguous again, as without the stage."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.second = torch.nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.second(torch.relu(self.first(x))))


def two_convs(tmp_path: Path) -> Path:
    torch.manual_seed(4)
    return save_frozen(TwoConvs(), [torch.randn(1, 16, 28, 28)], tmp_path / "convs.ptl")


def unfrozen_mlp(tmp_path: Path) -> Path:
    """The same MLP saved as users save it, without torch.jit.freeze: bind-time freezing makes its weights
    constants first."""
    torch.manual_seed(3)
    module = ResidualMlp().eval()
    path = save_lite_model(module, tmp_path / "unfrozen.ptl")
    torch.save([torch.randn(64, 512)], path.with_suffix(".inputs.pt"))
    return path


@pytest.mark.parametrize("make_model", [mlp, two_convs, unfrozen_mlp],
                         ids=["linear sites", "conv sites", "linear sites, saved unfrozen"])
def test_the_verdict_rule_and_what_each_verdict_does_from_cpp(make_model, tmp_path: Path) -> None:
    model = make_model(tmp_path)
    done = subprocess.run([str(BUILD / "model_check_check"), str(model), str(model.with_suffix(".inputs.pt"))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "model_check_check: ok", done.stdout
    assert "FAIL" not in done.stdout


def predictor_run(predictor: Path, model: Path, env: dict[str, str], *args: object) -> dict:
    run = run_predictor(predictor, model, "--iters", "3", "--warmup", "1", "--json", *args, env=env)
    assert run.returncode == 0, run.stderr + run.stdout
    return run.json()


def test_turned_off_the_later_runs_are_generated_and_the_report_says_so(predictor: Path, tmp_path: Path) -> None:
    model = mlp(tmp_path)
    env = dict(os.environ) | {MODEL_CHECK_HOOK: "without_compiled"}
    report = predictor_run(predictor, model, env)
    assert report["outputs_match"] is True, report["mismatch"]
    (checked,) = report["model_check"]["checks"]
    assert checked["inputs"] == "forward(Float[64, 512])"
    assert checked["compared"] is True and checked["compiled_kept"] is False and 2 <= checked["pairs"] <= 5
    assert checked["with_compiled_ms"] > 0 and checked["without_compiled_ms"] > 0 and checked["note"] == ""
    # The first run (generated), the one after the preparation run (compiled, settled: the check follows), then
    # the warm-up and 3 timed runs on the generated kernels; the check's own runs are not counted.
    for site in report["specialized_sites"]:
        assert (site["generated_calls"], site["specialized_calls"]) == (5, 1), site
    text = run_predictor(predictor, model, "--iters", "3", "--warmup", "1", env=env)
    assert text.returncode == 0, text.stderr
    assert "model check on forward(Float[64, 512]): compiled kernels turned off, every site runs its generated " \
           "kernels (a run" in text.stdout, text.stdout


def test_kept_the_later_runs_are_compiled(predictor: Path, tmp_path: Path) -> None:
    model = mlp(tmp_path)
    env = dict(os.environ) | {MODEL_CHECK_HOOK: "with_compiled"}
    report = predictor_run(predictor, model, env)
    (checked,) = report["model_check"]["checks"]
    assert checked["compared"] is True and checked["compiled_kept"] is True
    for site in report["specialized_sites"]:
        assert (site["generated_calls"], site["specialized_calls"]) == (1, 5), site


def test_no_check_without_a_compiled_kernel_to_compare(predictor: Path, tmp_path: Path) -> None:
    """Every race lost: no run ran a compiled kernel, so there is nothing to check."""
    model = mlp(tmp_path)
    report = predictor_run(predictor, model, race_on_environment() | {GENERATED_WINS_HOOK: "1"})
    (checked,) = report["model_check"]["checks"]
    assert checked == {"inputs": "forward(Float[64, 512])", "compared": False, "compiled_kept": True, "pairs": 0,
                       "with_compiled_ms": 0, "without_compiled_ms": 0, "median_ratio": 0,
                       "note": "no site ran a compiled kernel: nothing to compare"}
    for site in report["specialized_sites"]:
        assert site["specialized_calls"] == 0, site
    text = run_predictor(predictor, model, "--iters", "3", env=race_on_environment() | {GENERATED_WINS_HOOK: "1"})
    assert "model check on forward(Float[64, 512]): no verdict (no site ran a compiled kernel: nothing to compare); " \
           "the races' choices stand" in text.stdout, text.stdout


def test_a_model_whose_second_run_could_be_seen_is_not_checked(predictor: Path, tmp_path: Path) -> None:
    """A run the stage makes unseen must not change what the caller sees: a model whose attributes a run writes
    is never run more than the caller runs it."""
    path = tmp_path / "counts.ptl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frozen = torch.jit.freeze(torch.jit.script(CountsItsCalls().eval()), preserved_attrs=["calls"])
        path.write_bytes(frozen._save_to_buffer_for_lite_interpreter())
    env = dict(os.environ) | {MODEL_CHECK_HOOK: "without_compiled"}
    report = predictor_run(predictor, path, env, "--input", _save_inputs(tmp_path, [torch.randn(1, 3, 16, 16)]))
    assert report["model_check"]["checks"] == []
    assert report["model_check"]["not_run_because"].startswith(
        "a run it makes unseen could be seen: it reads or writes the module's attributes"), report["model_check"]


def test_no_stage_no_check(predictor: Path, tmp_path: Path) -> None:
    model = mlp(tmp_path)
    report = predictor_run(predictor, model, dict(os.environ), "--no-specialize")
    assert report["model_check"] == {
        "not_run_because": "the bind-time stage is off (LoadOptions::specialize, or dynamic dispatch)", "checks": []}


@pytest.mark.parametrize("verdict", ["with_compiled", "without_compiled"])
def test_concurrent_runs_beside_the_check_agree_with_no_stage(verdict: str, tmp_path: Path) -> None:
    """Four threads run the model at two shapes at once while the check decides (when a run finds itself alone)
    and after: every output agrees with the model's without the stage, and none shares memory with another
    (tests/cpp/stage_race_check.cpp)."""
    model = mlp(tmp_path)
    torch.save([torch.randn(32, 512)], tmp_path / "other.pt")
    env = race_on_environment() | {MODEL_CHECK_HOOK: verdict}
    done = subprocess.run([str(BUILD / "stage_race_check"), str(model), str(model.with_suffix(".inputs.pt")),
                           str(tmp_path / "other.pt"), "100"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "stage_race_check: ok", done.stdout


def test_no_model_check_keeps_the_races_choices(predictor: Path, tmp_path: Path) -> None:
    model = mlp(tmp_path)
    env = dict(os.environ) | {MODEL_CHECK_HOOK: "without_compiled"}  # a check would turn them off
    report = predictor_run(predictor, model, env, "--no-model-check")
    assert report["model_check"] == {
        "not_run_because": "turned off (LoadOptions::model_check; lite_predictor --no-model-check)", "checks": []}
    for site in report["specialized_sites"]:
        assert (site["generated_calls"], site["specialized_calls"]) == (1, 5), site
