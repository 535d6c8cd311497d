"""lite_predictor's contract at its edges: refusals, usage errors, exit codes."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from predictor_runner import lite_module_ops, run_predictor, save_lite_model
from tools.selection import load_op_selection

REPO_ROOT = Path(__file__).resolve().parent.parent

OPS_YAML = Path(__file__).resolve().parent.parent / "lightweight_dispatch_ops.yaml"


class UsesErf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.erf(x) + torch.special.expm1(x)


def test_op_outside_the_yaml_is_refused_naming_every_missing_op(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(UsesErf(), tmp_path / "uses_erf.ptl")
    assert {"aten::erf", "aten::expm1"} <= lite_module_ops(model)
    assert not {"aten::erf", "aten::expm1"} & load_op_selection(OPS_YAML).names
    torch.save([torch.ones(3)], tmp_path / "uses_erf.inputs.pt")
    run = run_predictor(predictor, model)
    assert run.returncode == 4
    assert "no generated kernel for 2 operator(s)" in run.stderr
    assert "aten::erf" in run.stderr and "aten::expm1" in run.stderr
    assert "dump_ops.py --model-file" in run.stderr
    assert run.stdout == ""


def test_the_same_model_runs_with_dynamic_dispatch(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(UsesErf(), tmp_path / "uses_erf.ptl")
    x = torch.linspace(-1, 1, 5)
    torch.save([x], tmp_path / "in.pt")
    torch.save([torch.erf(x) + torch.special.expm1(x)], tmp_path / "expected.pt")
    run = run_predictor(predictor, model, "--dispatch", "dynamic", "--input", tmp_path / "in.pt",
                        "--expected", tmp_path / "expected.pt")
    assert run.returncode == 0, run.stderr
    assert "MATCH" in run.stdout


def test_help_explains_the_flags(predictor: Path) -> None:
    run = run_predictor(predictor, "--help")
    assert run.returncode == 0
    for flag in ("--input", "--expected", "--atol", "--rtol", "--iters", "--warmup", "--threads", "--dispatch",
                 "--save-outputs", "--json", "--no-specialize", "--no-model-check", "--prepare"):
        assert flag in run.stdout


def test_unknown_flag_is_a_usage_error(predictor: Path) -> None:
    run = run_predictor(predictor, "model.ptl", "--fast")
    assert run.returncode == 2
    assert "unknown option '--fast'" in run.stderr


def test_bad_dispatch_value_is_a_usage_error(predictor: Path) -> None:
    run = run_predictor(predictor, "model.ptl", "--dispatch", "fastest")
    assert run.returncode == 2
    assert "--dispatch expects 'static' or 'dynamic'" in run.stderr


def test_missing_model_file_cannot_load(predictor: Path, tmp_path: Path) -> None:
    run = run_predictor(predictor, tmp_path / "absent.ptl")
    assert run.returncode == 3
    assert "no such model file" in run.stderr


def test_model_needing_inputs_says_so(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(UsesErf(), tmp_path / "no_inputs_beside.ptl")
    run = run_predictor(predictor, model, "--dispatch", "dynamic")
    assert run.returncode == 5
    assert "needs inputs: pass --input" in run.stderr


def test_mismatching_reference_exits_1(predictor: Path, models_dir: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.pt"
    torch.save([torch.zeros(1, 1000)], wrong)
    run = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--expected", wrong, "--iters", "1")
    assert run.returncode == 1
    assert "MISMATCH" in run.stdout and "output 0 differs" in run.stdout


def test_a_quantized_op_outside_the_yaml_is_refused_with_advice_that_is_true(predictor: Path, tmp_path: Path) -> None:
    from torch.ao import quantization

    from test_models.quantization import quantized_engine

    class Squares(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.quant, self.dequant = quantization.QuantStub(), quantization.DeQuantStub()
            self.mul = torch.ao.nn.quantized.FloatFunctional()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.quant(x)
            return self.dequant(self.mul.mul(x, x))

    with quantized_engine("x86"):
        model = Squares().eval()
        model.qconfig = quantization.get_default_qconfig("x86")
        quantization.prepare(model, inplace=True)
        model(torch.rand(2, 3))
        quantization.convert(model, inplace=True)
        path = save_lite_model(model, tmp_path / "squares.ptl")
    assert "quantized::mul" in lite_module_ops(path)
    assert "quantized::mul" not in load_op_selection(OPS_YAML).names
    torch.save([torch.rand(2, 3)], tmp_path / "squares.inputs.pt")
    run = run_predictor(predictor, path)
    assert run.returncode == 4
    assert "no generated kernel for 1 operator(s) the model calls:\n  quantized::mul\n" in run.stderr
    assert "The ops yaml this build was generated from does not list them" in run.stderr
    assert run_predictor(predictor, path, "--dispatch", "dynamic").returncode == 0


def test_large_temporaries_are_reused_from_the_heap_not_mmapped_each_run(predictor: Path, models_dir: Path) -> None:
    # glibc's defaults serve MobileNetV2's large temporaries with mmap: fresh zero pages, faulted in on every
    # run. The runtime raises the thresholds at load, so steady-state runs fault (almost) nothing. (The
    # generated kernels' temporaries: the bind-time stage's kernels need few, test_bind_time_kernels.)
    def faults(*flags: str) -> float:
        run = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--threads", "1", "--iters", "3", "--json",
                            "--no-specialize", *flags)
        assert run.returncode == 0, run.stderr
        return run.json()["page_faults_per_run"]

    tuned, default = faults(), faults("--default-malloc")
    assert tuned < 50
    assert default > 10 * max(tuned, 50)


def transparent_huge_page_mode() -> str:
    """The kernel's THP mode ("always", "madvise", "never"), "" where it has none."""
    try:
        line = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return ""
    return line[line.find("[") + 1:line.find("]")] if "[" in line else ""


def test_reordered_weights_sit_on_huge_pages_where_the_system_allows(predictor: Path, models_dir: Path) -> None:
    # The background preparation thread advises its malloc arena for 2 MB pages, so the copies of MobileNetV2's
    # weights oneDNN reorders there are faulted in as huge pages; --default-malloc leaves the allocator alone
    # and (THP "madvise") nothing of the model is on huge pages.
    mode = transparent_huge_page_mode()
    if mode not in ("madvise", "always"):
        pytest.skip(f"transparent huge pages are {mode or 'absent'} on this machine")

    def huge_pages(*flags: str) -> dict:
        run = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--threads", "1", "--iters", "3", "--json",
                            *flags)
        assert run.returncode == 0, run.stderr  # outputs still match eager
        return run.json()["huge_pages"]

    advised, plain = huge_pages(), huge_pages("--default-malloc")
    assert advised["system_mode"] == plain["system_mode"] == mode
    assert advised["heap_advised"] and advised["not_advised_because"] == ""
    assert advised["advised_bytes"] >= 64 << 20
    assert advised["process_huge_page_bytes"] >= 8 << 20
    assert not plain["heap_advised"] and plain["advised_bytes"] == 0
    if mode == "madvise":
        assert plain["process_huge_page_bytes"] < advised["process_huge_page_bytes"] / 4
    text = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--iters", "1").stdout
    assert "memory:    thread arenas on huge pages (64 MB advised)" in text and f"(THP mode {mode})" in text
    text = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--iters", "1", "--default-malloc").stdout
    assert "memory:    heap as glibc sets it up (--default-malloc)" in text
    assert "faulted in ahead" not in text


def test_heap_pages_faulted_in_ahead_cost_their_writer_no_fault() -> None:
    """The mechanism, without a race against a loader: a helper thread faults in 16 MB of the heap; writing a block
    allocated there costs the writing thread next to no page fault, the next 16 MB one per page."""
    program = REPO_ROOT / "build" / "heap_prefault_check"
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    if result.stdout.startswith("heap_prefault_check: SKIP"):
        pytest.skip(result.stdout.strip())
    assert result.stdout.startswith("heap_prefault_check: OK"), result.stdout + result.stderr


def test_the_heap_prefault_is_reported_and_can_be_turned_off(predictor: Path, models_dir: Path) -> None:
    """How much the helper faulted in while loading depends on how long the load took beside it; the switches
    that turn it off leave it at 0, and the outputs are the same either way."""
    reports = {
        flags: run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--iters", "1", "--json", *flags)
        for flags in [(), ("--no-heap-prefault",), ("--default-malloc",)]
    }
    for run in reports.values():
        assert run.returncode == 0, run.stderr
        assert run.json()["outputs_match"] is True
        assert run.json()["first_run_page_faults"] > 0
    assert reports[("--no-heap-prefault",)].json()["heap_prefaulted_bytes"] == 0
    assert reports[("--default-malloc",)].json()["heap_prefaulted_bytes"] == 0
    assert 0 <= reports[()].json()["heap_prefaulted_bytes"] <= (14 + 32) << 20  # the file's size and 32 MB
    text = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--iters", "1", "--no-heap-prefault").stdout
    assert "faulted in ahead" not in text and "page faults), median" in text


def test_load_time_is_reported_stage_by_stage(predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--iters", "1", "--json")
    assert run.returncode == 0, run.stderr
    report = run.json()
    stages = report["load_stages_ms"]
    assert set(stages) == {"file_check", "libtorch_load", "bind", "specialize", "bytecode_check"}
    assert all(v >= 0 for v in stages.values())
    assert stages["libtorch_load"] > 0 and stages["file_check"] > 0
    assert sum(stages.values()) <= report["load_ms"] + 1e-6
    text = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--iters", "1").stdout
    assert "ms: file check " in text and ", LibTorch's loader " in text and ", binding " in text
