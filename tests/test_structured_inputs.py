"""forward's arguments from an inputs file: any value torch.save stores, the method's defaults for the
trailing ones the file leaves out, and the same strict checks as for tensors; outputs of any structure,
flattened for comparison and saved with their structure."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import pytest
import torch
from torch import Tensor

from predictor_runner import PredictorRun, run_predictor, save_lite_model
from scripts.dump_ops import flatten_outputs
from test_models import get_model, typed_arguments

MODEL = "typed_arguments"
BAD_INPUTS = 5


@pytest.fixture()
def model(models_dir: Path) -> Path:
    return models_dir / f"{MODEL}.ptl"


def save(path: Path, value: object) -> Path:
    torch.save(value, path)
    return path


def eager_outputs(*arguments: object) -> list[Tensor]:
    with torch.no_grad():
        return flatten_outputs(get_model(MODEL).build()(*arguments))


def run(predictor: Path, model: Path, *args: object) -> PredictorRun:
    return run_predictor(predictor, model, "--iters", "1", "--warmup", "0", *args)


def assert_bitwise_equal(a: list[Tensor], b: list[Tensor]) -> None:
    assert len(a) == len(b) > 0
    for left, right in zip(a, b):
        assert left.dtype == right.dtype and left.shape == right.shape
        assert left.contiguous().reshape(-1).view(torch.uint8).equal(right.contiguous().reshape(-1).view(torch.uint8))


def expect_refusal(result: PredictorRun, *fragments: str) -> None:
    assert result.returncode == BAD_INPUTS, (result.returncode, result.stderr)
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


# --- running

def test_the_exported_inputs_leave_bias_and_extras_to_their_defaults(models_dir: Path) -> None:
    saved = torch.load(models_dir / f"{MODEL}.inputs.pt")
    assert len(saved) == 6  # forward takes 8 after self
    assert saved[2:] == [4, 0.25, True, [3, 1]]


def test_runs_statically_matching_eager_and_dynamic_bit_for_bit(predictor: Path, model: Path, tmp_path: Path) -> None:
    outputs = {}
    for mode in ("static", "dynamic"):
        # Bits hold for the generated kernels: the bind-time stage's are held to 1e-5 (test_bind_time_kernels).
        flags = ["--no-specialize"] if mode == "static" else []
        result = run(predictor, model, "--dispatch", mode, "--json", "--save-outputs", tmp_path / f"{mode}.pt", *flags)
        assert result.returncode == 0, result.stderr
        assert result.json()["outputs_match"] is True, result.json()["mismatch"]  # eager's, beside the model
        outputs[mode] = flatten_outputs(torch.load(tmp_path / f"{mode}.pt"))
    assert len(outputs["static"]) == 4 + 1 + 1  # four flows, the pooled flow, the update count
    assert_bitwise_equal(outputs["static"], outputs["dynamic"])


class ModuleNotNamedSelf(torch.nn.Module):
    def forward(module, x: Tensor, scale: float = 2.0) -> Tensor:  # noqa: N805 (a method's first name is free)
        return torch.relu(x) * scale


def test_forward_whose_module_argument_is_not_named_self_takes_its_inputs(predictor: Path, tmp_path: Path) -> None:
    # TorchScript makes the first parameter the module whatever it is called; the inputs file holds only what
    # comes after it (before, `x` was checked against the module's type and the model was refused).
    model = save_lite_model(ModuleNotNamedSelf().eval(), tmp_path / "not_self.ptl")
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    inputs, expected = save(tmp_path / "in.pt", [x]), save(tmp_path / "out.pt", [torch.relu(x) * 2.0])
    result = run(predictor, model, "--input", inputs, "--expected", expected, "--json")
    assert result.returncode == 0, result.stderr
    assert result.json()["outputs_match"] is True


def test_a_file_of_just_the_two_images_runs_with_the_defaults(predictor: Path, model: Path, tmp_path: Path) -> None:
    # RAFT's case: forward(image1, image2, num_flow_updates: int = 12, ...) called with the images alone.
    images = typed_arguments.images()
    inputs = save(tmp_path / "images.pt", list(images))
    expected = save(tmp_path / "expected.pt", eager_outputs(*images))
    result = run(predictor, model, "--input", inputs, "--expected", expected, "--json")
    assert result.returncode == 0, result.stderr
    assert result.json()["outputs_match"] is True
    assert result.json()["num_outputs"] == 12 + 1 + 1


def test_every_argument_kind_given_matches_eager(predictor: Path, model: Path, tmp_path: Path) -> None:
    image1, image2 = typed_arguments.images()
    arguments = (image1, image2, 3, 0.75, False, [2, 4], torch.full((1, 2, 8, 8), 0.1),
                 {"first": torch.ones(2), "second": torch.arange(3.0)})
    inputs = save(tmp_path / "all.pt", list(arguments))
    expected = save(tmp_path / "expected.pt", eager_outputs(*arguments))
    result = run(predictor, model, "--input", inputs, "--expected", expected, "--json")
    assert result.returncode == 0, result.stderr
    assert result.json()["outputs_match"] is True
    assert result.json()["num_outputs"] == 3 + 3 + 1  # the extras join the summary dict


def test_a_tuple_of_arguments_works_like_a_list(predictor: Path, model: Path, tmp_path: Path) -> None:
    images = typed_arguments.images()
    inputs = save(tmp_path / "images.pt", (*images, 2))
    expected = save(tmp_path / "expected.pt", eager_outputs(*images, 2))
    result = run(predictor, model, "--input", inputs, "--expected", expected)
    assert result.returncode == 0, result.stderr


def test_an_int_where_a_float_is_declared_is_that_float(predictor: Path, model: Path, tmp_path: Path) -> None:
    images = typed_arguments.images()
    inputs = save(tmp_path / "int_scale.pt", [*images, 2, 1])
    expected = save(tmp_path / "expected.pt", eager_outputs(*images, 2, 1.0))
    result = run(predictor, model, "--input", inputs, "--expected", expected)
    assert result.returncode == 0, result.stderr


class AllDefaulted(torch.nn.Module):
    def forward(self, steps: int = 3, start: float = 1.5) -> Tensor:
        return torch.full([steps], start)


def test_a_model_whose_arguments_all_have_defaults_needs_no_inputs_file(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(AllDefaulted(), tmp_path / "defaults.ptl")
    result = run(predictor, model, "--dispatch", "dynamic", "--json", "--save-outputs", tmp_path / "out.pt")
    assert result.returncode == 0, result.stderr
    assert result.json()["inputs"] == "(none: forward's defaults)"
    assert torch.load(tmp_path / "out.pt").equal(torch.full([3], 1.5))


# --- refusals: exit 5, naming the argument, before anything runs

def test_a_string_where_an_int_is_declared_is_refused(predictor: Path, model: Path, tmp_path: Path) -> None:
    inputs = save(tmp_path / "bad.pt", [*typed_arguments.images(), "four"])
    expect_refusal(run(predictor, model, "--input", inputs),
                   "argument 'num_flow_updates' (input 2) is a str, but the model's forward declares "
                   "num_flow_updates: int = 12")


def test_a_bool_where_a_float_is_declared_is_refused(predictor: Path, model: Path, tmp_path: Path) -> None:
    inputs = save(tmp_path / "bad.pt", [*typed_arguments.images(), 4, True])
    expect_refusal(run(predictor, model, "--input", inputs), "argument 'scale' (input 3) is a bool")


def test_a_list_element_of_the_wrong_type_is_refused_with_its_place(
    predictor: Path, model: Path, tmp_path: Path
) -> None:
    inputs = save(tmp_path / "bad.pt", [*typed_arguments.images(), 4, 0.25, True, [3, "wide"]])
    expect_refusal(run(predictor, model, "--input", inputs),
                   "argument 'sizes' (input 5) element 1 is a str, but the model's forward declares "
                   "sizes: Optional[List[int]] = None")


def test_a_dict_value_of_the_wrong_type_is_refused_with_its_key(predictor: Path, model: Path, tmp_path: Path) -> None:
    inputs = save(tmp_path / "bad.pt", [*typed_arguments.images(), 4, 0.25, True, None, None, {"gain": 2.0}])
    expect_refusal(run(predictor, model, "--input", inputs),
                   "argument 'extras' (input 7) key 'gain' is a float, but the model's forward declares "
                   "extras: Optional[Dict[str, Tensor]] = None")


def test_a_missing_required_argument_is_refused(predictor: Path, model: Path, tmp_path: Path) -> None:
    inputs = save(tmp_path / "one.pt", [typed_arguments.images()[0]])
    expect_refusal(run(predictor, model, "--input", inputs),
                   "the model's forward needs argument 'image2' (Tensor), which the inputs file does not give and "
                   "which has no default")


def test_too_many_arguments_are_refused(predictor: Path, model: Path, tmp_path: Path) -> None:
    image1, image2 = typed_arguments.images()
    inputs = save(tmp_path / "nine.pt", [image1, image2, 4, 0.25, True, [3, 1], None, None, 7])
    expect_refusal(run(predictor, model, "--input", inputs),
                   "the model's forward takes 8 input(s), the file has 9: forward(image1: Tensor, image2: Tensor, "
                   "num_flow_updates: int = 12")


def test_a_tensor_of_another_dtype_or_rank_than_exported_is_refused(
    predictor: Path, model: Path, tmp_path: Path
) -> None:
    image1, image2 = typed_arguments.images()
    wrong_dtype = save(tmp_path / "double.pt", [image1, image2.double()])
    expect_refusal(run(predictor, model, "--input", wrong_dtype),
                   "input 1 is Double[1, 3, 8, 8], but the model was exported with Float[1, 3, 8, 8] for argument "
                   "'image2'")
    wrong_rank = save(tmp_path / "rank.pt", [image1[0], image2])
    expect_refusal(run(predictor, model, "--input", wrong_rank),
                   "input 0 is Float[3, 8, 8], but the model was exported with Float[1, 3, 8, 8]")


class SumsAList(torch.nn.Module):
    def forward(self, xs: List[Tensor]) -> Tensor:
        return torch.cat(xs)


def test_tensors_inside_a_list_are_checked_against_the_example(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(SumsAList(), tmp_path / "sums.ptl")
    save(tmp_path / "sums.inputs.pt", [[torch.ones(2), torch.ones(3)]])
    inputs = save(tmp_path / "double.pt", [[torch.ones(2), torch.ones(3, dtype=torch.float64)]])
    expect_refusal(run(predictor, model, "--dispatch", "dynamic", "--input", inputs),
                   "input 0 element 1 is Double[3], but the model was exported with Float[3] for argument 'xs'")


def test_an_inputs_file_in_the_legacy_format_is_refused(predictor: Path, model: Path, tmp_path: Path) -> None:
    legacy = tmp_path / "legacy.pt"
    torch.save(list(typed_arguments.images()), legacy, _use_new_zipfile_serialization=False)
    expect_refusal(run(predictor, model, "--input", legacy), "not a zip archive")


# --- outputs

def test_save_outputs_keeps_the_named_tuple_list_and_dict(predictor: Path, model: Path, tmp_path: Path) -> None:
    result = run(predictor, model, "--save-outputs", tmp_path / "out.pt")
    assert result.returncode == 0, result.stderr
    saved = torch.load(tmp_path / "out.pt")  # weights_only, torch.load's default
    with torch.no_grad():
        eager = get_model(MODEL).build()(*get_model(MODEL).example_inputs())
    flows, summary, updates = saved  # a plain tuple: the named tuple's field names are not saved
    assert isinstance(saved, tuple) and isinstance(flows, list) and isinstance(summary, dict)
    assert updates == eager.updates == 4
    assert list(summary) == list(eager.summary) == ["pooled"]
    torch.testing.assert_close(summary["pooled"], eager.summary["pooled"])
    assert len(flows) == len(eager.flows)
    for got, want in zip(flows, eager.flows):
        torch.testing.assert_close(got, want)


class Labels(torch.nn.Module):
    def forward(self, x: Tensor, label: str, gain: float = 2.0) -> Tuple[Tensor, str, Optional[Tensor]]:
        return x * gain, label + "!", None


def test_strings_and_none_in_and_out(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(Labels(), tmp_path / "labels.ptl")
    x = torch.arange(3.0)
    inputs = save(tmp_path / "labels.inputs.pt", [x, "cat"])
    # The string is compared as its UTF-8 bytes, None not at all.
    expected = save(tmp_path / "expected.pt", flatten_outputs(Labels()(x, "cat")))
    assert [t.dtype for t in torch.load(expected)] == [torch.float32, torch.uint8]
    result = run(predictor, model, "--dispatch", "dynamic", "--input", inputs, "--expected", expected,
                 "--save-outputs", tmp_path / "out.pt")
    assert result.returncode == 0, result.stderr
    doubled, label, nothing = torch.load(tmp_path / "out.pt")
    assert label == "cat!" and nothing is None
    torch.testing.assert_close(doubled, x * 2.0)


def test_a_failure_leaves_the_save_outputs_file_untouched(predictor: Path, model: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.pt"
    out.write_bytes(b"previous outputs")
    inputs = save(tmp_path / "bad.pt", [*typed_arguments.images(), "four"])
    expect_refusal(run(predictor, model, "--input", inputs, "--save-outputs", out))
    assert out.read_bytes() == b"previous outputs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pt", "out.pt"]  # no temporary left behind
