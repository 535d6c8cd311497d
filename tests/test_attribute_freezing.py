"""Bind-time freezing (bind_time/attribute_freezing.h): a model saved without torch.jit.freeze, as users save
scripted models, reads its weights as module attributes; where no method can change them the stage reads them as
constants, resolves `self.training` branches and folds inference batch norms into the convs before them, so the
unfrozen model gets the kernels the frozen one gets. Where an attribute may change (assigned, written in place,
handed to another function) every function keeps its bytecode, and the report says why.

Each test fails when freezing computes the wrong thing (outputs against eager on new input values, and against
the stage-free run in one process), is silently not applied (report counts, sites against the frozen model's), or
is applied where an attribute may change (the harness's runs after the first see the written attribute)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import differential_models as dm
from predictor_runner import run_predictor, save_lite_model
from scripts.dump_ops import flatten_outputs
from test_differential import assert_agrees, check_source, harness  # noqa: F401 (a fixture)
from test_models import get_model


def run_json(predictor: Path, model: Path, *args: object) -> dict:
    run = run_predictor(predictor, model, "--iters", "3", "--warmup", "0", "--json", *args)
    assert run.returncode == 0, run.stderr + run.stdout
    return run.json()


def fresh_inputs(name: str, seed: int) -> list[torch.Tensor]:
    """The model's example inputs' shapes, with new values: freezing must not depend on the values it met."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=generator) for t in get_model(name).example_inputs()]


@pytest.mark.parametrize("name, batch_norms", [("small_resnet_unfrozen", 15), ("mobilenet_v2_unfrozen", 52)])
def test_an_unfrozen_model_gets_the_frozen_models_sites_and_eagers_outputs(
    name: str, batch_norms: int, predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    frozen_name = name.removesuffix("_unfrozen")
    unfrozen = run_json(predictor, models_dir / f"{name}.ptl")
    frozen = run_json(predictor, models_dir / f"{frozen_name}.ptl")
    freezing = unfrozen["attribute_freezing"]
    assert freezing["applied"] is True and freezing["kept_because"] == ""
    assert freezing["folded_batch_norms"] == batch_norms
    assert freezing["constant_branches"] > 0 and freezing["attribute_reads"] > 0
    assert frozen["attribute_freezing"]["applied"] is False  # nothing to freeze in a frozen model
    assert len(unfrozen["specialized_sites"]) == len(frozen["specialized_sites"])
    assert unfrozen["outputs_match"] is True, unfrozen["mismatch"]
    # No batch_norm call is left: every one was folded into its conv.
    assert not any(site["op"] == "aten::batch_norm" for site in unfrozen["call_sites"])
    # New values: eager's outputs within 1e-5, and the stage-free run's.
    module = get_model(name).build().eval()
    inputs = fresh_inputs(name, 7)
    torch.save(inputs, tmp_path / "inputs.pt")
    with torch.no_grad():
        torch.save(flatten_outputs(module(*inputs)), tmp_path / "expected.pt")
    for flags in ([], ["--prepare", "first-call"], ["--no-specialize"]):
        run = run_json(predictor, models_dir / f"{name}.ptl", "--input", tmp_path / "inputs.pt",
                       "--expected", tmp_path / "expected.pt", "--atol", "1e-5", *flags)
        assert run["outputs_match"] is True, (flags, run["mismatch"])


def test_the_text_report_says_what_freezing_did(predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, models_dir / "small_resnet_unfrozen.ptl", "--iters", "1")
    assert run.returncode == 0, run.stderr
    assert "bind-time: attributes frozen (no method can change them): " in run.stdout
    assert "15 batch_norm call(s) folded into their conv2d (15 folded weight(s), 15 written over the weights loaded)" \
        in run.stdout


def test_no_specialize_freezes_nothing(predictor: Path, models_dir: Path) -> None:
    run = run_json(predictor, models_dir / "small_resnet_unfrozen.ptl", "--no-specialize")
    assert run["attribute_freezing"]["applied"] is False
    assert any(site["op"] == "aten::batch_norm" for site in run["call_sites"])


class ConvBnBlock(torch.nn.Module):
    """conv + batch norm (every variant freezing folds: bias or not, affine or not, grouped) + relu."""

    def __init__(self, bias: bool, affine: bool, groups: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=bias, groups=groups)
        self.bn = torch.nn.BatchNorm2d(8, affine=affine, eps=1e-3)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            if affine:
                self.bn.weight.uniform_(0.5, 1.5)
                self.bn.bias.uniform_(-1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def save_with_eagers_outputs(module: torch.nn.Module, x: torch.Tensor, stem: Path) -> Path:
    """Scripts `module` unfrozen to STEM.ptl, with `x` as STEM.inputs.pt and eager's outputs as STEM.expected.pt."""
    model = save_lite_model(module, stem.with_suffix(".ptl"))
    torch.save([x], stem.with_suffix(".inputs.pt"))
    with torch.no_grad():
        torch.save(flatten_outputs(module(x)), stem.with_suffix(".expected.pt"))
    return model


@pytest.mark.parametrize("bias, affine, groups", [(False, True, 1), (True, True, 1), (True, False, 1), (False, True, 8)])
def test_every_form_of_conv_and_batch_norm_folds_to_eagers_outputs(
    bias: bool, affine: bool, groups: int, predictor: Path, tmp_path: Path
) -> None:
    torch.manual_seed(3)
    module = ConvBnBlock(bias, affine, groups).eval()
    model = save_with_eagers_outputs(module, torch.randn(2, 8, 9, 9), tmp_path / "block")
    run = run_json(predictor, model, "--atol", "1e-5")
    assert run["attribute_freezing"]["folded_batch_norms"] == 1
    assert run["outputs_match"] is True, run["mismatch"]
    assert len(run["specialized_sites"]) == 1


class ForwardsToAnImplementation(torch.nn.Module):
    """torchvision's ResNet: forward calls _forward_impl, and the lite bytecode holds both, each inlining the
    same two conv + batch norm pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = ConvBnBlock(True, True, 1), ConvBnBlock(False, True, 8)

    def _forward_impl(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward_impl(x)


def test_methods_that_inline_the_same_batch_norms_share_their_folded_weights(
    predictor: Path, tmp_path: Path
) -> None:
    torch.manual_seed(5)
    module = ForwardsToAnImplementation().eval()
    model = save_with_eagers_outputs(module, torch.randn(1, 8, 7, 7), tmp_path / "impl")
    run = run_json(predictor, model, "--atol", "1e-5")
    freezing = run["attribute_freezing"]
    assert freezing["folded_batch_norms"] == 4, freezing  # two in forward, two in _forward_impl
    assert freezing["folded_weights"] == 2, freezing  # made once each
    # The two methods' bytecode does the same: frozen once, the program given to the second (tests/cpp/api_check.cpp
    # runs _forward_impl by name).
    assert (freezing["frozen_functions"], freezing["shared_programs"]) == (2, 1), freezing
    assert run["outputs_match"] is True, run["mismatch"]
    text = run_predictor(predictor, model, "--iters", "1")
    assert "4 batch_norm call(s) folded into their conv2d (2 folded weight(s), 2 written over" in text.stdout, text.stdout
    assert "in 2 method(s) (1 the same bytecode as one before them, frozen once)" in text.stdout, text.stdout


class AddsToItsImplementation(ForwardsToAnImplementation):
    """forward does more than _forward_impl: two programs, each frozen on its own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward_impl(x) + 1.0


def test_methods_whose_bytecode_differs_are_frozen_apart(predictor: Path, tmp_path: Path) -> None:
    torch.manual_seed(6)
    module = AddsToItsImplementation().eval()
    model = save_with_eagers_outputs(module, torch.randn(1, 8, 7, 7), tmp_path / "adds")
    run = run_json(predictor, model, "--atol", "1e-5")
    freezing = run["attribute_freezing"]
    assert (freezing["frozen_functions"], freezing["shared_programs"]) == (2, 0), freezing
    assert freezing["folded_batch_norms"] == 4 and freezing["folded_weights"] == 2, freezing
    assert run["outputs_match"] is True, run["mismatch"]


class ReadsAFoldedWeightElsewhere(torch.nn.Module):
    """The conv's weight also feeds a second, plain conv: the fold must not write over it."""

    def __init__(self) -> None:
        super().__init__()
        self.block = ConvBnBlock(True, True, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) + torch.nn.functional.conv2d(x, self.block.conv.weight, None, 1, 1)


class OneConvTwoBatchNorms(torch.nn.Module):
    """One conv weight folded with two batch norms: two folds from one source, so neither may overwrite it."""

    def __init__(self) -> None:
        super().__init__()
        self.block = ConvBnBlock(False, True, 1)
        self.other_bn = ConvBnBlock(False, True, 1).bn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block.bn(self.block.conv(x)) - self.other_bn(self.block.conv(x))


@pytest.mark.parametrize("module_type, in_place", [(ForwardsToAnImplementation, 2), (ReadsAFoldedWeightElsewhere, 0),
                                                   (OneConvTwoBatchNorms, 0)])
def test_a_fold_writes_over_the_loaded_weight_only_where_nothing_else_reads_it(
    module_type: type, in_place: int, predictor: Path, tmp_path: Path
) -> None:
    """Written over where nothing else can read the loaded weight (no second copy of the weights); beside it
    where another call reads it or another fold starts from it, which outputs against eager on new values
    catch: the other call would see the folded weight."""
    torch.manual_seed(11)
    module = module_type().eval()
    model = save_with_eagers_outputs(module, torch.randn(1, 8, 7, 7), tmp_path / "model")
    run = run_json(predictor, model, "--atol", "1e-5")
    freezing = run["attribute_freezing"]
    assert freezing["folded_batch_norms"] >= 1 and freezing["folded_in_place"] == in_place, freezing
    assert run["outputs_match"] is True, run["mismatch"]
    x = torch.randn(1, 8, 7, 7)
    torch.save([x], tmp_path / "new.inputs.pt")
    with torch.no_grad():
        torch.save(flatten_outputs(module(x)), tmp_path / "new.expected.pt")
    for flags in ([], ["--prepare", "first-call"]):
        again = run_json(predictor, model, "--input", tmp_path / "new.inputs.pt",
                         "--expected", tmp_path / "new.expected.pt", "--atol", "1e-5", *flags)
        assert again["outputs_match"] is True, (flags, again["mismatch"])


class AssignsAnAttribute(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.conv(x)


def test_a_model_that_assigns_an_attribute_is_not_frozen(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(AssignsAnAttribute(), tmp_path / "assigns.ptl")
    torch.save([torch.randn(1, 3, 8, 8)], tmp_path / "assigns.inputs.pt")
    run = run_json(predictor, model)
    freezing = run["attribute_freezing"]
    assert freezing["applied"] is False
    assert "SET_ATTR" in freezing["kept_because"] and "forward" in freezing["kept_because"]


# Written in place, not assigned: no SET_ATTR anywhere, so only the trace of the rewritten bytecode can tell that
# the weight a compiled kernel would pack, or the statistics a folded batch norm would bake in, change every run.
WRITES_ITS_WEIGHT = """
import torch
import torch.nn.functional as F
from torch import nn

class WritesItsWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("weight", torch.rand(4, 3, 3, 3) - 0.5)

    def forward(self, x):
        self.weight.mul_(1.5)
        return (torch.relu(F.conv2d(x, self.weight)),)
"""

WRITES_ITS_STATISTICS = """
import torch
import torch.nn.functional as F
from torch import nn

class WritesItsStatistics(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.bn(self.conv(x))
        self.bn.running_mean.add_(0.25)
        return (y,)
"""


@pytest.mark.parametrize("source, class_name", [(WRITES_ITS_WEIGHT, "WritesItsWeight"),
                                                (WRITES_ITS_STATISTICS, "WritesItsStatistics")])
def test_an_attribute_written_in_place_keeps_every_function_unfrozen(
    source: str, class_name: str, harness: Path, predictor: Path, tmp_path: Path  # noqa: F811
) -> None:
    shapes = [(1, 3, 10, 10)] * 3 + [(2, 3, 12, 12)] * 2
    model = dm.GeneratedModel(0, class_name, textwrap.dedent(source), shapes, [])
    exported = dm.export(model, tmp_path, dm.available_ops())
    unfrozen = exported.variants["unfrozen"]
    # The harness runs the inputs in order on fresh models with and without the stage, one caller at a time:
    # every run after the first sees the attribute as the runs before left it.
    assert_agrees([dm.run_harness(unfrozen, exported.inputs, "unfrozen", threads=1)])
    run = run_json(predictor, unfrozen, "--input", exported.inputs[0])
    freezing = run["attribute_freezing"]
    assert freezing["applied"] is False
    assert "may write" in freezing["kept_because"], freezing


class ResetsItsStatistics(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))

    @torch.jit.export
    def reset(self) -> int:
        self.bn.running_mean.zero_()
        return 0


def test_a_second_method_that_writes_an_attribute_keeps_forward_unfrozen(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(ResetsItsStatistics().eval(), tmp_path / "resets.ptl")
    torch.save([torch.randn(1, 3, 8, 8)], tmp_path / "resets.inputs.pt")
    run = run_json(predictor, model)
    freezing = run["attribute_freezing"]
    assert freezing["applied"] is False
    assert "reset" in freezing["kept_because"] and "zero_" in freezing["kept_because"], freezing


TRAINING_BRANCH = """
import torch
import torch.nn.functional as F
from torch import nn

class DropsInTraining(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        if self.training:
            y = y * 0.0
        return (y * 2.0,)
"""


def test_unfrozen_models_agree_with_the_stage_free_runs_on_new_values_and_shapes(
    harness: Path, tmp_path: Path  # noqa: F811
) -> None:
    shapes = [(1, 3, 10, 10)] * 3 + [(2, 3, 12, 12)] * 2 + [(1, 3, 10, 10)]
    assert_agrees(check_source(tmp_path, TRAINING_BRANCH, "DropsInTraining", shapes))


class SkipsInEval(torch.nn.Module):
    """torchvision's stochastic depth: checks of constants (`not in` a list of strings, `not self.training or
    p == 0.0`) that only computing them at bind time resolves; before them nothing could be frozen."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.p = 0.2
        self.mode = "row"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        if self.mode not in ["batch", "row"]:
            raise ValueError(f"mode has to be either 'batch' or 'row', but got {self.mode}")
        if not self.training or self.p == 0.0:
            return torch.relu(y)
        return y * torch.rand([y.shape[0], 1, 1, 1])


class Classifier(torch.nn.Module):
    """A linear layer whose weight is a parameter that requires grad, as every unfrozen model's are."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(512, 512)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


@pytest.mark.parametrize("module, example", [(SkipsInEval(), torch.randn(1, 3, 8, 8)),
                                             (Classifier(), torch.randn(64, 512))])
def test_checks_of_constants_are_computed_and_parameters_compile(
    module: torch.nn.Module, example: torch.Tensor, predictor: Path, tmp_path: Path
) -> None:
    module = module.eval()
    model = save_lite_model(module, tmp_path / "m.ptl")
    torch.save([example], tmp_path / "m.inputs.pt")
    with torch.no_grad():
        torch.save(flatten_outputs(module(example)), tmp_path / "m.expected.pt")
    run = run_json(predictor, model, "--atol", "1e-5")
    assert run["outputs_match"] is True, run["mismatch"]
    freezing = run["attribute_freezing"]
    assert freezing["applied"] is True, freezing
    sites = run["specialized_sites"]
    # Kept untimed (conftest's no-race hook): the compiled kernel serves the later runs.
    assert len(sites) == 1 and sites[0]["notes"] == [] and sites[0]["specialized_calls"] > 0, sites
    if isinstance(module, SkipsInEval):
        assert freezing["computed_calls"] >= 3 and freezing["folded_batch_norms"] == 1
        assert not any(site["op"] == "aten::rand" for site in run["call_sites"])  # the training path is gone


class RestoresItsState(torch.nn.Module):
    """Saved as torch.ao's quantized modules are: a __getstate__ / __setstate__ pair, whose __setstate__ assigns
    the attributes. The loader runs it; nothing after the load can (forward does not call it, and a caller can
    run only the model's own methods), so it must not keep the model unfrozen."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.rand(4, 3, 3, 3) - 0.5
        self.bias = torch.rand(4) - 0.5

    @torch.jit.export
    def __getstate__(self) -> tuple[torch.Tensor, torch.Tensor, bool]:
        return (self.weight, self.bias, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, torch.Tensor, bool]) -> None:
        self.weight = state[0]
        self.bias = state[1]
        self.training = state[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, self.weight, self.bias)


class HoldsAStatefulBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = RestoresItsState()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.block(x))


class RestoresItsOwnState(RestoresItsState):
    """The same pair on the model's own class: a caller can run its __setstate__, so the model stays unfrozen."""


def save_with_fresh_values(module: torch.nn.Module, stem: Path, seed: int) -> Path:
    """STEM.ptl, with an input of new values and eager's outputs for it beside it."""
    generator = torch.Generator().manual_seed(seed)
    return save_with_eagers_outputs(module.eval(), torch.randn(2, 3, 9, 9, generator=generator), stem)


def test_a_submodules_state_restoring_method_leaves_the_model_frozen(predictor: Path, tmp_path: Path) -> None:
    model = save_with_fresh_values(HoldsAStatefulBlock(), tmp_path / "block", seed=11)
    assert b"RestoresItsState.__setstate__" in model.read_bytes()  # the bytecode carries it, SET_ATTR and all
    run = run_json(predictor, model, "--atol", "1e-5")
    freezing = run["attribute_freezing"]
    assert freezing["applied"] is True and freezing["attribute_reads"] >= 2, freezing
    assert run["outputs_match"] is True, run["mismatch"]
    sites = run["specialized_sites"]
    assert len(sites) == 1 and sites[0]["specialized_calls"] > 0, sites  # the conv's weight became a constant


def test_the_models_own_state_restoring_method_keeps_it_unfrozen(predictor: Path, tmp_path: Path) -> None:
    model = save_with_fresh_values(RestoresItsOwnState(), tmp_path / "own", seed=12)
    run = run_json(predictor, model, "--atol", "1e-5")
    freezing = run["attribute_freezing"]
    assert freezing["applied"] is False
    assert "RestoresItsOwnState.__setstate__ has SET_ATTR" in freezing["kept_because"], freezing
    assert run["outputs_match"] is True, run["mismatch"]


def test_an_unfrozen_quantized_model_is_frozen_and_stays_bit_for_bit_the_stock_interpreters(
    predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    """Every quantized conv's __setstate__ assigns its packed weights, which kept such models unfrozen; now
    forward's attribute reads become constants, on new input values, with outputs unchanged to the bit."""
    from test_quantized_models import assert_bitwise_equal, engine_of, exported

    name = "quantized_detection_head_unfrozen"
    model = tmp_path / "model.ptl"  # away from its reference outputs, which are for the example inputs
    model.write_bytes(exported(models_dir, name).read_bytes())
    generator = torch.Generator().manual_seed(21)
    inputs = [torch.rand(t.shape, generator=generator) for t in get_model(name).example_inputs()]
    torch.save(inputs, tmp_path / "fresh.inputs.pt")
    runs = {}
    for mode in ("static", "dynamic"):
        run = run_predictor(predictor, model, "--qengine", engine_of(name), "--dispatch", mode, "--input",
                            tmp_path / "fresh.inputs.pt", "--iters", "2", "--warmup", "0", "--json",
                            "--save-outputs", tmp_path / f"{mode}.pt")
        assert run.returncode == 0, run.stderr
        runs[mode] = run.json()
    freezing = runs["static"]["attribute_freezing"]
    assert freezing["applied"] is True and freezing["attribute_reads"] > 0, freezing
    assert_bitwise_equal(tmp_path / "static.pt", tmp_path / "dynamic.pt")


class SignedZeros(torch.nn.Module):
    """Two float attributes equal as numbers, 0.0 and -0.0, which freezing makes two constants: reused as one, the
    second product's sign would be the first's."""

    def __init__(self) -> None:
        super().__init__()
        self.positive_zero = 0.0
        self.negative_zero = -0.0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * self.positive_zero, x * self.negative_zero


def test_a_frozen_float_attribute_keeps_its_sign_bit(predictor: Path, tmp_path: Path) -> None:
    module = SignedZeros().eval()
    x = torch.rand(3, 4) + 0.5  # positive: x * 0.0 is +0.0 and x * -0.0 is -0.0
    model = save_with_eagers_outputs(module, x, tmp_path / "zeros")
    run = run_predictor(predictor, model, "--iters", "1", "--warmup", "0", "--json",
                        "--save-outputs", tmp_path / "out.pt")
    assert run.returncode == 0, run.stderr
    freezing = run.json()["attribute_freezing"]
    assert freezing["applied"] is True and freezing["attribute_reads"] == 2, freezing
    got = flatten_outputs(torch.load(tmp_path / "out.pt"))
    with torch.no_grad():
        expected = flatten_outputs(module(x))
    assert len(got) == 2
    for ours, eagers in zip(got, expected):
        assert torch.equal(ours.view(torch.int32), eagers.view(torch.int32)), (ours, eagers)
    assert torch.signbit(got[1]).all() and not torch.signbit(got[0]).any()
