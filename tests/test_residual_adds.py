"""Residual adds fused into the conv before them, in every form models write them (bind_time/weight_sites.h's
ResidualPush): `identity + conv(x)` (the residual pushed before the call), `out += identity` (add_ on the conv's
own result, the residual from a register after the call: torchvision's BasicBlock, MobileNetV3's and
EfficientNet's blocks), and `out += self.downsample(x)` (add_ writing the residual, which may be fused only where
nothing else ever sees that tensor). Saved frozen and unfrozen (bind-time freezing first); outputs compared with
eager within 1e-5, also on input values the kernels were not prepared on."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from predictor_runner import race_on_environment, run_predictor
from scripts.dump_ops import flatten_outputs

CONV_ADD_RELU = ("aten::conv2d", "aten::add_.Tensor", "aten::relu_")


def report_of(predictor: Path, model: Path, *args: object, env: dict[str, str] | None = None) -> dict:
    run = run_predictor(predictor, model, "--iters", "3", "--warmup", "0", "--json", *args, env=env)
    assert run.returncode == 0, run.stderr + run.stdout
    return run.json()


def fused_kinds(report: dict) -> list[tuple[str, ...]]:
    return [tuple(site["fused"]) for site in report["specialized_sites"]]


@pytest.mark.parametrize("name", ["small_resnet", "small_resnet_unfrozen"])
def test_every_basic_block_runs_its_residual_add_and_relu_inside_a_conv_kernel(
    name: str, predictor: Path, models_dir: Path
) -> None:
    # Six blocks: four add the block's input after their second conv (`out += identity`), two add the second
    # conv's result after their downsample conv (`out += self.downsample(x)`, which writes the second conv's
    # result in place; nothing else sees it, so the sum may go to a new tensor).
    report = report_of(predictor, models_dir / f"{name}.ptl")
    assert report["outputs_match"] is True, report["mismatch"]
    assert fused_kinds(report).count(CONV_ADD_RELU) == 6, fused_kinds(report)
    add_runs = {s["runs"] for s in report["call_sites"] if s["op"] == "aten::add_.Tensor"}
    assert add_runs == {"static+fused(conv2d,add_.Tensor,relu_)"}


class TwoConvs(torch.nn.Module):
    """Two 32 -> 32 3x3 convs at 48x48 (21M multiply-adds each; kept untimed, conftest's no-race hook: a kernel
    that computes the wrong sum fails the stage's check or the comparison with eager). One
    class per form, with no branch on it: bind-time freezing proves nothing past a branch on an attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_a = torch.nn.Conv2d(32, 32, 3, 1, 1)
        self.conv_b = torch.nn.Conv2d(32, 32, 3, 1, 1)


class OutPlusIdentity(TwoConvs):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.conv_a(x)
        out += x  # add_ on the conv's result, the input from a register
        return torch.relu(out), x


class OutPlusConv(TwoConvs):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.relu(self.conv_a(x))
        a += self.conv_b(x)  # add_ writing conv_a's result, which nothing else reads
        return torch.relu_(a), x


class ResidualReadAfter(TwoConvs):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.conv_a(x)
        kept = [a]
        a += self.conv_b(x)  # add_ writing conv_a's result, which the list keeps and the caller gets twice
        return a, kept[0]


class WritesACopy(TwoConvs):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.clone()
        y += self.conv_a(x)  # add_ writing a tensor no site made
        return y, x


class ConvNormActivation(torch.nn.Sequential):
    """A conv, its batch norm and an optional activation, as one Sequential (torchvision's Conv2dNormActivation)."""

    def __init__(self, activation: bool) -> None:
        layers: list[torch.nn.Module] = [torch.nn.Conv2d(32, 32, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(32)]
        if activation:
            layers.append(torch.nn.Hardswish(inplace=True))
        super().__init__(*layers)
        statistics = torch.Generator().manual_seed(len(layers))
        norm = layers[1]
        assert isinstance(norm, torch.nn.BatchNorm2d)
        norm.running_mean.uniform_(-0.1, 0.1, generator=statistics)
        norm.running_var.uniform_(0.5, 1.5, generator=statistics)


class InvertedResidual(torch.nn.Module):
    """torchvision's MobileNetV3 and EfficientNet block: `result = self.block(input); result += input`. Inlined,
    the nested Sequentials leave `conv; STORE t; LOAD t; LOAD input; add_` (bind-time freezing drops the store)."""

    def __init__(self) -> None:
        super().__init__()
        self.block = torch.nn.Sequential(ConvNormActivation(activation=True), ConvNormActivation(activation=False))
        self.use_res_connect = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        result = self.block(input)
        if self.use_res_connect:
            result += input
        return result


class InvertedResidualReadTwice(InvertedResidual):
    """The block's result read before the add too: its register has two reads, and the store must stay."""

    def forward(self, input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        result = self.block(input)
        activated = torch.relu(result)
        result += input
        return result, activated


def save(module: torch.nn.Module, frozen: bool, path: Path, seed: int = 0) -> Path:
    module = module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(module)
        if frozen:
            scripted = torch.jit.freeze(scripted)
        path.write_bytes(scripted._save_to_buffer_for_lite_interpreter())
    save_inputs(module, path.with_suffix(".inputs.pt"), path.with_suffix(".expected.pt"), seed)
    return path


def save_inputs(module: torch.nn.Module, inputs: Path, expected: Path, seed: int) -> None:
    x = torch.randn(1, 32, 48, 48, generator=torch.Generator().manual_seed(seed))
    torch.save([x], inputs)
    with torch.no_grad():
        torch.save(flatten_outputs(module(x)), expected)


# Per form: what the conv site with the add runs (the last site reported).
FUSED = {
    OutPlusIdentity: ("aten::conv2d", "aten::add_.Tensor", "aten::relu"),
    OutPlusConv: ("aten::conv2d", "aten::add_.Tensor", "aten::relu_"),
    # Not provably unseen: the add stays outside, on the generated kernel.
    ResidualReadAfter: ("aten::conv2d",),
    WritesACopy: ("aten::conv2d",),
    InvertedResidual: ("aten::conv2d", "aten::add_.Tensor"),
    InvertedResidualReadTwice: ("aten::conv2d",),
}


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "unfrozen"])
@pytest.mark.parametrize("form", list(FUSED), ids=lambda form: form.__name__)
def test_a_residual_add_is_fused_where_no_one_can_tell_and_matches_eager(
    form: type[torch.nn.Module], frozen: bool, predictor: Path, tmp_path: Path
) -> None:
    module = form()
    model = save(module, frozen, tmp_path / "residual.ptl")
    report = report_of(predictor, model)
    assert report["outputs_match"] is True, report["mismatch"]  # eager, 1e-5
    site = report["specialized_sites"][-1]
    assert tuple(site["fused"]) == FUSED[form], fused_kinds(report)
    assert site["notes"] == [], "the compiled kernel was refused: its result differed, or it did not compile"
    assert site["specialized_calls"] > 0
    # New values, not the ones the kernels were prepared and checked on.
    save_inputs(module, tmp_path / "fresh.pt", tmp_path / "fresh.expected.pt", seed=1)
    again = report_of(predictor, model, "--input", tmp_path / "fresh.pt", "--expected", tmp_path / "fresh.expected.pt")
    assert again["outputs_match"] is True, again["mismatch"]
    assert again["specialized_sites"][-1]["specialized_calls"] > 0


def test_the_generated_path_of_a_kernel_that_writes_its_residual_gives_the_stock_result(
    predictor: Path, tmp_path: Path
) -> None:
    # First-call preparation runs the generated kernels as the reference and races them against the compiled
    # kernel on the caller's own tensors (the race on, as users run it): an add that writes its residual must not
    # write it more than once.
    module = OutPlusConv()
    model = save(module, True, tmp_path / "residual.ptl")
    for prepare in ("first-call", "background"):
        report = report_of(predictor, model, "--prepare", prepare, "--iters", "1", env=race_on_environment())
        assert report["outputs_match"] is True, (prepare, report["mismatch"])
        off = report_of(predictor, model, "--no-specialize")
        assert off["outputs_match"] is True


def test_profiles_count_a_kernel_run_at_the_add_as_the_conv(predictor: Path, tmp_path: Path) -> None:
    # `out += x`: the kernel is bound to the add's instruction (the residual comes after the call); --profile-ops
    # must still put its time under conv2d, or the benchmark's per-layer tables and its check that no operator
    # outside a partition got slower would see a 2 ms "add".
    model = save(OutPlusIdentity(), True, tmp_path / "residual.ptl")
    report = report_of(predictor, model, "--profile-ops", "--threads", "1")
    ops = {op["op"]: op["ms_per_run"] for op in report["op_profile"]["ops"]}
    assert ops["aten::add_"] < ops["aten::conv2d"] / 5, ops
