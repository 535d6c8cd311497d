"""The C++ torchvision kernels (custom_kernels/) against the Python references (test_models/torchvision_ops.py).

Each kernel runs through the `kernel_check` driver on arguments saved from Python and must agree with the
reference on random inputs from fixed seeds and on edge cases; bad arguments must fail with a message naming
the op and exit code 1. The references are themselves checked against hand-computed results (and
deform_conv2d against torch's conv2d), so that they are not only checked against the kernels. Finally, the
detection test models must script, freeze and run in the lite interpreter with eager PyTorch's results.
"""
from __future__ import annotations

import importlib.util
import io
import subprocess
import warnings
from pathlib import Path
from typing import Union

import pytest
import torch
import torch.jit.mobile
from torch import Tensor

from test_models import get_model
from test_models import torchvision_ops as tv

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = REPO_ROOT / "build"
KERNEL_CHECK_CANDIDATES = (BUILD_DIR / "custom_kernels" / "kernel_check", BUILD_DIR / "kernel_check")

Argument = Union[Tensor, float, int, bool]
DTYPES = (torch.float32, torch.float64)
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-10, "atol": 1e-10}}

# With torchvision installed its own ops are used by the models; the kernels are still checked against the
# reference functions, which are called directly.
TORCHVISION_OPS = tv.ensure_torchvision_ops()


# --------------------------------------------------------------------------------------------- helpers


@pytest.fixture(scope="session")
def kernel_check() -> Path:
    for candidate in KERNEL_CHECK_CANDIDATES:
        if candidate.is_file():
            return candidate
    pytest.fail(f"kernel_check is missing (looked for {', '.join(map(str, KERNEL_CHECK_CANDIDATES))}): "
                "run ./build.sh first")


def _saved(value: Argument) -> Tensor:
    """Arguments as kernel_check reads them: non-tensors become 0-dim float64, int64 or bool tensors."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    return torch.tensor(value, dtype=torch.float64)


def _invoke(kernel_check: Path, tmp_path: Path, op: str, args: tuple[Argument, ...]) -> subprocess.CompletedProcess:
    args_path, out_path = tmp_path / f"{op}.args.pt", tmp_path / f"{op}.out.pt"
    torch.save([_saved(a) for a in args], args_path)
    return subprocess.run([str(kernel_check), op, str(args_path), str(out_path)], capture_output=True, text=True,
                          timeout=120)


def run_kernel(kernel_check: Path, tmp_path: Path, op: str, *args: Argument) -> tuple[Tensor, ...]:
    result = _invoke(kernel_check, tmp_path, op, args)
    assert result.returncode == 0, f"kernel_check {op} failed: {result.stderr}"
    return tuple(torch.load(tmp_path / f"{op}.out.pt"))


def run_reference(op: str, *args: Argument) -> tuple[Tensor, ...]:
    result = tv.REFERENCES[op](*args)
    return result if isinstance(result, tuple) else (result,)


def assert_kernel_matches_reference(kernel_check: Path, tmp_path: Path, op: str, *args: Argument,
                                    exact: bool = False) -> tuple[Tensor, ...]:
    got = run_kernel(kernel_check, tmp_path, op, *args)
    expected = run_reference(op, *args)
    assert len(got) == len(expected)
    for actual, wanted in zip(got, expected):
        assert actual.dtype == wanted.dtype and actual.shape == wanted.shape, (actual.dtype, actual.shape,
                                                                                 wanted.dtype, wanted.shape)
        if exact or not wanted.is_floating_point():
            torch.testing.assert_close(actual, wanted, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(actual, wanted, equal_nan=True, **TOLERANCE[wanted.dtype])
    return got


def random_rois(generator: torch.Generator, count: int, batch: int, extent: float, dtype: torch.dtype) -> Tensor:
    """Rois in image coordinates over an image of side `extent`: most inside, some partly or wholly outside."""
    corner = torch.rand(count, 2, generator=generator, dtype=torch.float64) * extent * 1.4 - 0.3 * extent
    size = torch.rand(count, 2, generator=generator, dtype=torch.float64) * extent * 0.6
    index = torch.randint(0, batch, (count, 1), generator=generator).to(torch.float64)
    return torch.cat([index, corner, corner + size], dim=1).to(dtype)


def edge_rois(extent: float, dtype: torch.dtype) -> Tensor:
    """Zero-area, inverted, wholly outside, whole-image and border-straddling rois."""
    e = extent
    return torch.tensor(
        [
            [0, 0.3 * e, 0.4 * e, 0.3 * e, 0.4 * e],  # a point
            [1, 0.2 * e, 0.2 * e, 0.6 * e, 0.2 * e],  # zero height
            [0, 0.6 * e, 0.6 * e, 0.2 * e, 0.3 * e],  # inverted
            [1, -3.0 * e, -3.0 * e, -2.0 * e, -2.5 * e],  # wholly outside, before
            [0, 2.0 * e, 1.5 * e, 3.0 * e, 2.5 * e],  # wholly outside, after
            [1, 0.0, 0.0, e, e],  # the whole image
            [0, -0.1 * e, 0.9 * e, 0.2 * e, 1.1 * e],  # straddling a corner
            [1, 0.5, 0.5, e - 0.5, e - 0.5],  # half a pixel in
        ],
        dtype=dtype,
    )


def feature_map(generator: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


# ------------------------------------------------------------------------------------------------- nms


def clustered_boxes(generator: torch.Generator, count: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Boxes around a few centres, so that many overlap, with distinct random scores."""
    centres = torch.rand(6, 2, generator=generator, dtype=torch.float64) * 100
    which = torch.randint(0, 6, (count,), generator=generator)
    centre = centres[which] + torch.randn(count, 2, generator=generator, dtype=torch.float64) * 6
    size = 5 + torch.rand(count, 2, generator=generator, dtype=torch.float64) * 30
    boxes = torch.cat([centre - size / 2, centre + size / 2], dim=1)
    return boxes.to(dtype), torch.rand(count, generator=generator, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("iou_threshold", [0.3, 0.7])
def test_nms_matches_reference_on_clustered_boxes(kernel_check, tmp_path, dtype, seed, iou_threshold):
    boxes, scores = clustered_boxes(torch.Generator().manual_seed(seed), 200, dtype)
    (keep,) = assert_kernel_matches_reference(kernel_check, tmp_path, "nms", boxes, scores, iou_threshold)
    assert 10 < keep.numel() < 200, "the case should both keep and suppress boxes"


@pytest.mark.parametrize("dtype", DTYPES)
def test_nms_of_no_boxes_is_empty_int64(kernel_check, tmp_path, dtype):
    (keep,) = assert_kernel_matches_reference(kernel_check, tmp_path, "nms", torch.zeros(0, 4, dtype=dtype),
                                              torch.zeros(0, dtype=dtype), 0.5)
    assert keep.dtype == torch.int64 and keep.shape == (0,)


def test_nms_suppresses_everything_under_the_best_box(kernel_check, tmp_path):
    boxes = torch.tensor([[10.0, 10.0, 50.0, 50.0]]).repeat(5, 1) + torch.arange(5.0)[:, None]
    scores = torch.tensor([0.2, 0.9, 0.4, 0.1, 0.3])
    (keep,) = assert_kernel_matches_reference(kernel_check, tmp_path, "nms", boxes, scores, 0.5)
    assert keep.tolist() == [1]


def test_nms_breaks_score_ties_by_lower_index(kernel_check, tmp_path):
    # Disjoint boxes all kept in index order; two identical boxes keep the first.
    boxes = torch.tensor([[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5], [4, 4, 5, 5], [6, 6, 7, 7]], dtype=torch.float64)
    scores = torch.full((5,), 0.5, dtype=torch.float64)
    (keep,) = assert_kernel_matches_reference(kernel_check, tmp_path, "nms", boxes, scores, 0.5)
    assert keep.tolist() == [0, 1, 2, 4]


def test_nms_keeps_zero_area_boxes(kernel_check, tmp_path):
    # Two identical points have IoU 0/0 = NaN, which never exceeds the threshold, as in torchvision.
    boxes = torch.tensor([[5, 5, 5, 5], [5, 5, 5, 5], [0, 0, 10, 10], [3, 3, 3, 8]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    (keep,) = assert_kernel_matches_reference(kernel_check, tmp_path, "nms", boxes, scores, 0.1)
    assert keep.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("iou_threshold, expected", [(0.5, [0, 1]), (0.49, [0])])
def test_nms_suppresses_only_iou_above_the_threshold(kernel_check, tmp_path, iou_threshold, expected):
    boxes = torch.tensor([[0.0, 0.0, 2.0, 1.0], [0.0, 0.0, 1.0, 1.0]])  # IoU exactly 1/2
    scores = torch.tensor([0.9, 0.8])
    (keep,) = assert_kernel_matches_reference(kernel_check, tmp_path, "nms", boxes, scores, iou_threshold)
    assert keep.tolist() == expected


# ------------------------------------------------------------------------------------------- roi_align


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align_matches_reference(kernel_check, tmp_path, dtype, aligned, sampling_ratio):
    generator = torch.Generator().manual_seed(10 + sampling_ratio + aligned)
    features = feature_map(generator, (2, 5, 9, 12), dtype)
    rois = torch.cat([random_rois(generator, 24, 2, 48.0, dtype), edge_rois(48.0, dtype)])
    (out,) = assert_kernel_matches_reference(kernel_check, tmp_path, "roi_align", features, rois, 0.25, 3, 4,
                                             sampling_ratio, aligned)
    assert out.shape == (32, 5, 3, 4)
    assert out.abs().sum() > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_roi_align_with_scale_one_and_one_bin(kernel_check, tmp_path, dtype):
    generator = torch.Generator().manual_seed(3)
    features = feature_map(generator, (1, 3, 7, 7), dtype)
    rois = random_rois(generator, 10, 1, 7.0, dtype)
    assert_kernel_matches_reference(kernel_check, tmp_path, "roi_align", features, rois, 1.0, 1, 1, 3, True)


@pytest.mark.parametrize("op", ["roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool"])
def test_roi_ops_with_no_rois_return_empty_outputs(kernel_check, tmp_path, op):
    features = torch.randn(1, 8, 5, 5)
    rois = torch.zeros(0, 5)
    extra = (1,) if op in ("ps_roi_align", "roi_align") else ()
    extra += (True,) if op == "roi_align" else ()
    outputs = assert_kernel_matches_reference(kernel_check, tmp_path, op, features, rois, 1.0, 2, 2, *extra)
    for output in outputs:
        assert output.shape[0] == 0 and output.shape[2:] == (2, 2)


# -------------------------------------------------------------------------------------------- roi_pool


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pooled", [(2, 2), (3, 5)])
def test_roi_pool_matches_reference_exactly(kernel_check, tmp_path, dtype, pooled):
    generator = torch.Generator().manual_seed(20 + pooled[1])
    features = feature_map(generator, (2, 4, 10, 8), dtype)
    rois = torch.cat([random_rois(generator, 24, 2, 20.0, dtype), edge_rois(20.0, dtype)])
    _, argmax = assert_kernel_matches_reference(kernel_check, tmp_path, "roi_pool", features, rois, 0.5, *pooled,
                                                exact=True)
    assert argmax.dtype == tv.INDEX_DTYPE
    assert (argmax == -1).any() and (argmax >= 0).any(), "the case should have empty and non-empty bins"


def test_roi_pool_rounds_halves_away_from_zero(kernel_check, tmp_path):
    # x = 2.5 rounds to 3 (C's round), not to 2 (torch.round's half-to-even): the roi is pixel (0, 3).
    features = torch.arange(36.0).reshape(1, 1, 6, 6)
    rois = torch.tensor([[0.0, 2.5, 0.0, 2.5, 0.0]])
    out, argmax = assert_kernel_matches_reference(kernel_check, tmp_path, "roi_pool", features, rois, 1.0, 1, 1)
    assert out.item() == 3.0 and argmax.item() == 3


# ------------------------------------------------------------------------------- position-sensitive ops


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sampling_ratio", [0, 1, 3])
def test_ps_roi_align_matches_reference(kernel_check, tmp_path, dtype, sampling_ratio):
    generator = torch.Generator().manual_seed(30 + sampling_ratio)
    features = feature_map(generator, (2, 2 * 3 * 2, 9, 10), dtype)
    rois = torch.cat([random_rois(generator, 20, 2, 36.0, dtype), edge_rois(36.0, dtype)])
    out, mapping = assert_kernel_matches_reference(kernel_check, tmp_path, "ps_roi_align", features, rois, 0.25,
                                                   3, 2, sampling_ratio)
    assert out.shape == (28, 2, 3, 2) and mapping.dtype == tv.INDEX_DTYPE


def test_ps_roi_align_of_an_empty_sampling_grid_is_nan(kernel_check, tmp_path):
    # torchvision divides by the raw sample count: a zero-size roi with adaptive sampling gives 0/0.
    features = torch.randn(1, 4, 6, 6, dtype=torch.float64)
    rois = torch.tensor([[0, 2.0, 2.0, 2.0, 2.0], [0, 1.0, 1.0, 5.0, 5.0]], dtype=torch.float64)
    out, _ = assert_kernel_matches_reference(kernel_check, tmp_path, "ps_roi_align", features, rois, 1.0, 2, 2, 0)
    assert out[0].isnan().all() and not out[1].isnan().any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pooled", [(2, 2), (3, 2)])
def test_ps_roi_pool_matches_reference(kernel_check, tmp_path, dtype, pooled):
    generator = torch.Generator().manual_seed(40 + pooled[0])
    channels = 3 * pooled[0] * pooled[1]
    features = feature_map(generator, (2, channels, 11, 9), dtype)
    rois = torch.cat([random_rois(generator, 20, 2, 22.0, dtype), edge_rois(22.0, dtype)])
    out, _ = assert_kernel_matches_reference(kernel_check, tmp_path, "ps_roi_pool", features, rois, 0.5, *pooled)
    assert (out == 0).any() and (out != 0).any(), "the case should have empty and non-empty bins"


# --------------------------------------------------------------------------------------- deform_conv2d


def deform_case(seed: int, dtype: torch.dtype, *, batch: int = 2, channels: int = 4, out_channels: int = 6,
                size: tuple[int, int] = (7, 8), kernel: tuple[int, int] = (3, 3), stride: int = 1, pad: int = 1,
                dilation: int = 1, groups: int = 1, offset_groups: int = 1, use_mask: bool = True,
                offset_scale: float = 2.0) -> tuple[Argument, ...]:
    generator = torch.Generator().manual_seed(seed)
    taps = kernel[0] * kernel[1]
    out_h = (size[0] + 2 * pad - dilation * (kernel[0] - 1) - 1) // stride + 1
    out_w = (size[1] + 2 * pad - dilation * (kernel[1] - 1) - 1) // stride + 1

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)

    input = rand(batch, channels, *size)
    weight = rand(out_channels, channels // groups, *kernel)
    offset = rand(batch, 2 * offset_groups * taps, out_h, out_w) * offset_scale
    # Without a mask, pass what torchvision passes: a placeholder the kernel must not read.
    mask = rand(batch, offset_groups * taps, out_h, out_w).sigmoid() if use_mask else torch.zeros(batch, 1, dtype=dtype)
    bias = rand(out_channels)
    return (input, weight, offset, mask, bias, stride, stride, pad, pad, dilation, dilation, groups, offset_groups,
            use_mask)


DEFORM_CONFIGS = {
    "plain": {},
    "no_mask": {"use_mask": False},
    "groups_2": {"groups": 2},
    "offset_groups_2": {"offset_groups": 2},
    "groups_2_offset_groups_4_no_mask": {"groups": 2, "offset_groups": 4, "use_mask": False, "out_channels": 4},
    "stride_2_no_padding": {"stride": 2, "pad": 0},
    "dilation_2_padding_2": {"dilation": 2, "pad": 2},
    "rectangular_kernel": {"kernel": (2, 3), "pad": 0},
    "large_offsets": {"offset_scale": 6.0},
    "batch_1": {"batch": 1},
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", sorted(DEFORM_CONFIGS))
def test_deform_conv2d_matches_reference(kernel_check, tmp_path, dtype, config):
    args = deform_case(50 + sorted(DEFORM_CONFIGS).index(config), dtype, **DEFORM_CONFIGS[config])
    (out,) = assert_kernel_matches_reference(kernel_check, tmp_path, "deform_conv2d", *args)
    assert out.abs().sum() > 0


def test_deform_conv2d_of_an_empty_batch(kernel_check, tmp_path):
    args = deform_case(60, torch.float32, batch=0)
    (out,) = assert_kernel_matches_reference(kernel_check, tmp_path, "deform_conv2d", *args)
    assert out.shape == (0, 6, 7, 8)


# ------------------------------------------------------------------------------------------ bad arguments


def _f(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.ones(*shape, dtype=dtype)


def _deform_with(**changes: Tensor) -> tuple[Argument, ...]:
    args = list(deform_case(70, torch.float32))
    names = ("input", "weight", "offset", "mask", "bias")
    for name, value in changes.items():
        args[names.index(name)] = value
    return tuple(args)


BAD_ARGUMENTS = {
    "nms_dets_not_n_by_4": ("nms", (_f(3, 3), _f(3), 0.5), "torchvision::nms: dets must have shape [N, 4]"),
    "nms_score_count": ("nms", (_f(3, 4), _f(2), 0.5), "dets and scores must have the same number of boxes"),
    "nms_dtype_mismatch": ("nms", (_f(3, 4), _f(3, dtype=torch.float64), 0.5), "must have the same dtype"),
    "nms_integer_boxes": ("nms", (torch.ones(3, 4, dtype=torch.int64), _f(3), 0.5), "must be float32 or float64"),
    "roi_align_rois_not_k_by_5": ("roi_align", (_f(1, 2, 4, 4), _f(3, 4), 1.0, 2, 2, 0, True),
                                  "torchvision::roi_align: rois must have shape [K, 5]"),
    "roi_align_input_3d": ("roi_align", (_f(2, 4, 4), _f(3, 5), 1.0, 2, 2, 0, True),
                           "torchvision::roi_align: input must be a 4-D tensor"),
    "roi_align_dtype_mismatch": ("roi_align", (_f(1, 2, 4, 4), _f(3, 5, dtype=torch.float64), 1.0, 2, 2, 0, True),
                                 "torchvision::roi_align: input (Float) and rois (Double) must have the same dtype"),
    "roi_align_zero_bins": ("roi_align", (_f(1, 2, 4, 4), _f(3, 5), 1.0, 0, 2, 0, True),
                            "pooled_height and pooled_width must be positive"),
    "roi_pool_batch_index": ("roi_pool", (_f(1, 2, 4, 4), torch.tensor([[1.0, 0, 0, 2, 2]]), 1.0, 2, 2),
                             "torchvision::roi_pool: rois[0, 0] = 1 is not a batch index of input (batch size 1)"),
    "ps_roi_align_channels": ("ps_roi_align", (_f(1, 6, 4, 4), _f(2, 5) * 0, 1.0, 2, 2, 0),
                              "torchvision::ps_roi_align: input channels (6) must be a multiple of pooled_height "
                              "* pooled_width (4)"),
    "ps_roi_pool_channels": ("ps_roi_pool", (_f(1, 8, 4, 4), _f(2, 5) * 0, 1.0, 3, 3),
                             "torchvision::ps_roi_pool: input channels (8) must be a multiple"),
    "deform_offset_shape": ("deform_conv2d", _deform_with(offset=_f(2, 9, 7, 8)),
                            "torchvision::deform_conv2d: offset must have shape [2, 18, 7, 8]"),
    "deform_mask_shape": ("deform_conv2d", _deform_with(mask=_f(2, 9, 6, 8)),
                          "torchvision::deform_conv2d: mask must have shape [2, 9, 7, 8]"),
    "deform_weight_channels": ("deform_conv2d", _deform_with(weight=_f(6, 3, 3, 3)),
                               "weight.shape[1] (3) * groups (1) must equal the input channels (4)"),
    "deform_bias_shape": ("deform_conv2d", _deform_with(bias=_f(5)), "bias must have shape [6]"),
    "deform_kernel_too_large": ("deform_conv2d", _deform_with(weight=_f(6, 4, 11, 3)),
                                "does not fit the padded input"),
    "argument_count": ("nms", (_f(3, 4), _f(3)), "kernel_check: nms takes 3 arguments, got 2"),
    "argument_kind": ("roi_pool", (_f(1, 2, 4, 4), _f(1, 5) * 0, 1.0, 2.0, 2),
                      "argument 3 (pooled_height) must be a 0-dim int64 tensor"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_arguments_fail_with_a_message_naming_the_problem(kernel_check, tmp_path, case):
    op, args, message = BAD_ARGUMENTS[case]
    result = _invoke(kernel_check, tmp_path, op, args)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert "Exception raised from" not in result.stderr, "the message should come without a C++ backtrace"


def test_unknown_op_is_a_usage_error(kernel_check, tmp_path):
    result = _invoke(kernel_check, tmp_path, "nms_rotated", (_f(1),))
    assert result.returncode == 2 and "unknown op 'nms_rotated'" in result.stderr


# ----------------------------------------------------------------- the references on hand-computed cases


def test_reference_nms_on_three_boxes():
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [20.0, 20.0, 30.0, 30.0]])
    scores = torch.tensor([0.8, 0.9, 0.7])
    # IoU of the first two: 81 / (100 + 100 - 81) = 0.68.
    assert tv.reference_nms(boxes, scores, 0.5).tolist() == [1, 2]
    assert tv.reference_nms(boxes, scores, 0.7).tolist() == [1, 0, 2]


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_reference_roi_align_of_a_constant_map_is_the_constant(aligned, sampling_ratio):
    features = torch.full((1, 2, 8, 8), 3.25, dtype=torch.float64)
    rois = torch.tensor([[0, 1.0, 1.5, 6.0, 4.0], [0, 2.0, 2.0, 2.5, 7.0]], dtype=torch.float64)
    out = tv.reference_roi_align(features, rois, 1.0, 2, 3, sampling_ratio, aligned)
    torch.testing.assert_close(out, torch.full((2, 2, 2, 3), 3.25, dtype=torch.float64))


def test_reference_roi_align_of_a_linear_ramp_is_the_ramp_at_bin_centres():
    # Bilinear interpolation is exact on an affine map, and a bin's samples are symmetric about its centre.
    rows, cols = torch.meshgrid(torch.arange(10.0), torch.arange(12.0), indexing="ij")
    features = (2 * rows - 3 * cols + 1).to(torch.float64)[None, None]
    x1, y1, x2, y2 = 2.0, 3.0, 8.0, 7.0
    rois = torch.tensor([[0, x1, y1, x2, y2]], dtype=torch.float64)
    out = tv.reference_roi_align(features, rois, 1.0, 2, 3, 2, True)
    centre_y = y1 - 0.5 + (torch.arange(2.0) + 0.5) * (y2 - y1) / 2
    centre_x = x1 - 0.5 + (torch.arange(3.0) + 0.5) * (x2 - x1) / 3
    expected = 2 * centre_y[:, None] - 3 * centre_x[None, :] + 1
    torch.testing.assert_close(out[0, 0], expected.to(torch.float64))


def test_reference_roi_align_samples_zero_beyond_one_pixel_outside():
    features = torch.ones(1, 1, 4, 4, dtype=torch.float64)
    rois = torch.tensor([[0, -10.0, -10.0, -6.0, -6.0]], dtype=torch.float64)
    assert tv.reference_roi_align(features, rois, 1.0, 2, 2, 2, False).abs().sum() == 0


def test_reference_roi_pool_takes_each_quadrant_maximum_and_its_index():
    features = torch.arange(16.0).reshape(1, 1, 4, 4)
    # Corners (0, 0)-(3, 3) cover all 4x4 pixels: 2x2 bins of 2x2 pixels, maxima at their bottom-right.
    out, argmax = tv.reference_roi_pool(features, torch.tensor([[0.0, 0.0, 0.0, 3.0, 3.0]]), 1.0, 2, 2)
    assert out[0, 0].tolist() == [[5.0, 7.0], [13.0, 15.0]]
    assert argmax[0, 0].tolist() == [[5, 7], [13, 15]]


def test_reference_roi_pool_of_an_outside_roi_is_zero_with_argmax_minus_one():
    out, argmax = tv.reference_roi_pool(torch.ones(1, 2, 4, 4), torch.tensor([[0.0, 10, 10, 12, 12]]), 1.0, 2, 2)
    assert (out == 0).all() and (argmax == -1).all()


def _channel_index_map(channels: int, size: int = 6) -> Tensor:
    return torch.arange(float(channels))[None, :, None, None].expand(1, channels, size, size).contiguous()


@pytest.mark.parametrize("op", ["ps_roi_align", "ps_roi_pool"])
def test_reference_position_sensitive_ops_read_the_bins_own_channel(op):
    # Every input channel is constant at its own index, so each output shows which channel it read.
    features = _channel_index_map(2 * 2 * 3)
    rois = torch.tensor([[0.0, 1.0, 1.0, 5.0, 5.0]])
    extra = (2,) if op == "ps_roi_align" else ()
    out, mapping = tv.REFERENCES[op](features, rois, 1.0, 2, 3, *extra)
    expected = torch.arange(12.0).reshape(1, 2, 2, 3)
    torch.testing.assert_close(out, expected)
    assert mapping.tolist() == expected.to(torch.int32).tolist()


def test_reference_ps_roi_pool_never_pools_the_last_row_and_column():
    features = torch.zeros(1, 1, 4, 4)
    features[0, 0, 3, :] = 100.0
    features[0, 0, :, 3] = 100.0
    features[0, 0, :3, :3] = 1.0
    out, _ = tv.reference_ps_roi_pool(features, torch.tensor([[0.0, 0, 0, 3, 3]]), 1.0, 1, 1)
    assert out.item() == 1.0


@pytest.mark.parametrize("config", ["plain", "groups_2", "stride_2_no_padding", "dilation_2_padding_2"])
def test_reference_deform_conv2d_without_offsets_is_conv2d(config):
    input, weight, offset, mask, bias, stride, _, pad, _, dilation, _, groups, offset_groups, _ = deform_case(
        80, torch.float64, **DEFORM_CONFIGS[config])
    out = tv.reference_deform_conv2d(input, weight, torch.zeros_like(offset), torch.ones_like(mask), bias,
                                     stride, stride, pad, pad, dilation, dilation, groups, offset_groups, True)
    expected = torch.nn.functional.conv2d(input, weight, bias, stride, pad, dilation, groups)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_reference_deform_conv2d_with_a_whole_pixel_offset_is_conv2d_of_the_shifted_input():
    input, weight, offset, mask, bias, *_ = deform_case(81, torch.float64)
    dy = torch.zeros_like(offset)
    dy[:, 0::2] = 1.0  # every tap samples one row lower
    out = tv.reference_deform_conv2d(input, weight, dy, mask, bias, 1, 1, 1, 1, 1, 1, 1, 1, False)
    # out[oy, ox] = sum w[i, j] * input[oy + i, ox + j - 1]: conv2d, no padding, of the input padded by one
    # column on each side and two rows below only.
    padded = torch.nn.functional.pad(input, (1, 1, 0, 2))
    expected = torch.nn.functional.conv2d(padded, weight, bias)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_reference_deform_conv2d_scales_each_tap_by_the_mask():
    input, weight, offset, mask, bias, *_ = deform_case(82, torch.float64)
    zero = torch.zeros_like(offset)
    half = tv.reference_deform_conv2d(input, weight, zero, torch.full_like(mask, 0.5), bias, 1, 1, 1, 1, 1, 1, 1, 1,
                                      True)
    expected = 0.5 * torch.nn.functional.conv2d(input, weight, None, 1, 1) + bias[None, :, None, None]
    torch.testing.assert_close(half, expected, rtol=1e-10, atol=1e-10)


# -------------------------------------------------------------------- registration and TorchScript use


def test_ensure_torchvision_ops_is_idempotent():
    assert TORCHVISION_OPS in ("reference", "torchvision")
    assert tv.ensure_torchvision_ops() == TORCHVISION_OPS
    assert tv.ensure_torchvision_ops() == TORCHVISION_OPS
    for name, schema in tv.SCHEMAS.items():
        assert str(getattr(torch.ops.torchvision, name).default._schema) == f"torchvision::{schema}"


def test_a_second_copy_of_the_module_does_not_register_the_ops_twice():
    path = REPO_ROOT / "test_models" / "torchvision_ops.py"
    spec = importlib.util.spec_from_file_location("torchvision_ops_second_copy", path)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    assert copy.ensure_torchvision_ops() == TORCHVISION_OPS


def test_registered_ops_are_callable_from_torchscript():
    def keep_boxes(boxes: Tensor, scores: Tensor) -> Tensor:
        return torch.ops.torchvision.nms(boxes, scores, 0.5)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(keep_boxes)
    boxes, scores = clustered_boxes(torch.Generator().manual_seed(5), 50, torch.float32)
    keep = scripted(boxes, scores)
    assert torch.equal(keep, tv.reference_nms(boxes, scores, 0.5))
    assert 0 < keep.numel() < 50


# ---------------------------------------------------------------------------- the detection test models


DETECTION_MODELS = ("ssdlite_head", "ssdlite_large_head", "roi_head", "detection_ops")


@pytest.mark.parametrize("name", DETECTION_MODELS)
def test_detection_model_scripted_frozen_and_lite_match_eager(name):
    spec = get_model(name)
    model, inputs = spec.build(), spec.example_inputs()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = model(*inputs)
        frozen = torch.jit.freeze(torch.jit.script(model))
        lite = torch.jit.mobile._load_for_lite_interpreter(io.BytesIO(frozen._save_to_buffer_for_lite_interpreter()))
        runs = {"frozen": frozen(*inputs), "lite": lite(*inputs)}
    assert all(t.numel() > 0 for t in eager), "every output should be non-empty"
    for run, outputs in runs.items():
        assert len(outputs) == len(eager)
        for got, expected in zip(outputs, eager):
            assert got.shape == expected.shape and got.dtype == expected.dtype, (run, got.shape, expected.shape)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name} {run}: {m}")
