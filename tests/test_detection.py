"""torchvision's detection ops through the same pipeline: declared once in custom_ops.yaml, generated
like native ops, called directly, and registered with the dispatcher only by an explicit call."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from test_models.torchvision_ops import ensure_torchvision_ops
from tools import gen_unboxing
from tools.custom_ops import load_custom_ops

REPO_ROOT = Path(__file__).resolve().parent.parent
TORCHVISION_SCHEMAS = {
    "torchvision::nms": "torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "torchvision::roi_align": "torchvision::roi_align(Tensor input, Tensor rois, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "torchvision::roi_pool": "torchvision::roi_pool(Tensor input, Tensor rois, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width) -> (Tensor, Tensor)",
    "torchvision::ps_roi_align": "torchvision::ps_roi_align(Tensor input, Tensor rois, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)",
    "torchvision::ps_roi_pool": "torchvision::ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width) -> (Tensor, Tensor)",
    "torchvision::deform_conv2d": "torchvision::deform_conv2d(Tensor input, Tensor weight, Tensor offset, "
    "Tensor mask, Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
    "SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) -> Tensor",
}


def test_custom_ops_yaml_has_torchvisions_exact_schemas() -> None:
    assert {name: op.schema for name, op in load_custom_ops().items()} == TORCHVISION_SCHEMAS


def test_python_registration_uses_the_same_schemas() -> None:
    ensure_torchvision_ops()
    for name, schema in TORCHVISION_SCHEMAS.items():
        op = getattr(torch.ops.torchvision, name.split("::")[1]).default
        assert str(op._schema) == schema


def test_generated_custom_kernel_calls_the_project_kernel_directly(tmp_path: Path) -> None:
    selection = tmp_path / "ops.yaml"
    selection.write_text("- torchvision::roi_align\n- aten::add.Tensor\n")
    assert gen_unboxing.main(["--op-selection-yaml-path", str(selection), "--install-dir", str(tmp_path / "g")]) == 0
    code = "".join(p.read_text() for p in sorted((tmp_path / "g").glob("UnboxingShard_*.cpp")))
    assert "#include <lightweight_dispatch/torchvision_kernels.h>" in code
    assert ("replace_arguments(stack, 7, lightweight_dispatch::custom::roi_align(input, rois, spatial_scale, "
            "pooled_height, pooled_width, sampling_ratio, aligned));") in code
    registration = (tmp_path / "g" / "CustomOpRegistration.cpp").read_text()
    assert "void register_custom_ops_with_dispatcher()" in registration
    assert "TORCH_LIBRARY" not in registration  # a static initialiser a linker could drop
    # Only the custom ops the build carries, each through its generated unboxing function.
    assert registration.count("&generated::") == 1
    assert "&generated::torchvision_roi_align}," in registration


def test_cpp_only_program_finds_and_runs_nms_from_static_archives() -> None:
    program = REPO_ROOT / "build" / "registration_check"
    if not program.is_file():
        pytest.fail(f"{program} is missing: run ./build.sh")
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "static table: torchvision::nms kept boxes 0 and 2" in result.stdout
    assert "dispatcher: torchvision::nms kept boxes 0 and 2" in result.stdout
    assert result.stdout.rstrip().endswith("registration_check: OK")


def test_static_library_is_linked_without_whole_archive() -> None:
    # The proof above only means something if nothing forces every object in: no whole-archive flags.
    build_ninja = (REPO_ROOT / "build" / "build.ninja").read_text()
    assert "whole-archive" not in build_ninja
    assert "libtorchvision_kernels.a" in build_ninja
