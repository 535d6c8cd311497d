"""torchvision's six detection ops as plain-torch references, registered under torchvision's own names.

torchvision does not import beside the pinned torch wheel, so detection models could not even be scripted:
`ensure_torchvision_ops()` defines `torchvision::nms`, `roi_align`, `roi_pool`, `ps_roi_align`, `ps_roi_pool`
and `deform_conv2d` with torchvision 0.29's exact schemas and these implementations, so a model scripted here
calls the same operators as one scripted with real torchvision. When torchvision does import, its own ops are
left alone.

The references follow torchvision's CPU kernels (rounding, border and empty-bin rules) but are written as
array code, independently of the C++ kernels in custom_kernels/ that the tests compare them with.
"""
from __future__ import annotations

import importlib.util
import math

import torch
from torch import Tensor

# torchvision returns roi_pool's argmax and the position-sensitive ops' channel mapping as int32.
INDEX_DTYPE = torch.int32

SCHEMAS: dict[str, str] = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align": "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "roi_pool": "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "ps_roi_align": "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)",
    "ps_roi_pool": "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "deform_conv2d": "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
    "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, "
    "SymInt groups, SymInt offset_groups, bool use_mask) -> Tensor",
}

# The registration must outlive the call: dropping the Library object unregisters its ops.
_LIBRARY: torch.library.Library | None = None


def ensure_torchvision_ops() -> str:
    """Make `torch.ops.torchvision.<op>` callable (also from TorchScript); idempotent.

    Returns "torchvision" when torchvision imports (nothing is registered) and "reference" otherwise.
    """
    global _LIBRARY
    if _torchvision_imports():
        return "torchvision"
    if _LIBRARY is None and not _already_defined():
        library = torch.library.Library("torchvision", "DEF")
        for name, schema in SCHEMAS.items():
            library.define(schema)
            library.impl(name, REFERENCES[name], "CompositeExplicitAutograd")
        _LIBRARY = library
    return "reference"


def _torchvision_imports() -> bool:
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError, OSError):
        return False
    return True


def _already_defined() -> bool:
    """True when another copy of this module (imported under a second name) registered the ops already."""
    try:
        torch.ops.torchvision.nms.default
    except (AttributeError, RuntimeError):
        return False
    return True


def _fail(op: str, message: str) -> None:
    raise RuntimeError(f"torchvision::{op} (reference): {message}")


def _check_rois(op: str, input: Tensor, rois: Tensor, pooled_height: int, pooled_width: int) -> None:
    if input.dim() != 4:
        _fail(op, f"input must be a 4-D tensor [N, C, H, W], got shape {list(input.shape)}")
    if rois.dim() != 2 or rois.shape[1] != 5:
        _fail(op, f"rois must have shape [K, 5], got {list(rois.shape)}")
    if input.dtype != rois.dtype:
        _fail(op, f"input ({input.dtype}) and rois ({rois.dtype}) must have the same dtype")
    if pooled_height <= 0 or pooled_width <= 0:
        _fail(op, f"pooled sizes must be positive, got {pooled_height} and {pooled_width}")


def _batch_index(op: str, roi: Tensor, batch: int) -> int:
    index = int(roi[0].item())  # truncates toward zero, as the C++ cast does
    if not -1 < roi[0].item() < batch:
        _fail(op, f"roi batch index {roi[0].item()} is outside the batch of {batch}")
    return index


def _scaled(value: Tensor, spatial_scale: float) -> Tensor:
    """`value * spatial_scale` with the scale rounded to value's dtype first, as torchvision's kernels do."""
    return value * torch.tensor(spatial_scale, dtype=value.dtype)


def _round_half_away(value: Tensor) -> int:
    """C's round(): halves go away from zero (torch.round rounds them to even)."""
    whole = torch.trunc(value)
    if torch.abs(value - whole) >= 0.5:
        whole = whole + torch.sign(value)
    return int(whole.item())


# ---------------------------------------------------------------------------------------------------- nms


def reference_nms(dets: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy NMS: visit boxes by descending score (stable), keep a box unless a kept box overlaps it with
    IoU > iou_threshold. Returns kept indices, int64, in visiting order."""
    if dets.dim() != 2 or dets.shape[1] != 4:
        _fail("nms", f"dets must have shape [N, 4], got {list(dets.shape)}")
    if scores.dim() != 1 or scores.shape[0] != dets.shape[0]:
        _fail("nms", f"scores must have shape [{dets.shape[0]}], got {list(scores.shape)}")
    x1, y1, x2, y2 = dets.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = torch.sort(scores, descending=True, stable=True).indices
    suppressed = torch.zeros(dets.shape[0], dtype=torch.bool)
    keep: list[int] = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        width = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        height = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = width * height
        iou = inter / (areas[i] + areas - inter)
        # Compared in float64, like the kernel's `float > double`; NaN (two empty boxes) never suppresses.
        suppressed |= iou.double() > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


# ---------------------------------------------------------------------------------- bilinear sampling


def _roi_align_sample(feature: Tensor, ys: Tensor, xs: Tensor) -> Tensor:
    """Bilinear samples of feature [C, H, W] at every (y, x) in ys [Ny] x xs [Nx] -> [C, Ny, Nx], with
    RoIAlign's border rule: a coordinate below -1 or beyond the size samples 0, otherwise it is clamped into
    the map (edge pixels repeat)."""
    height, width = feature.shape[1:]
    y_low, y_high, ly, y_ok = _clamped_axis(ys, height)
    x_low, x_high, lx, x_ok = _clamped_axis(xs, width)
    hy, hx = 1 - ly, 1 - lx

    def at(rows: Tensor, cols: Tensor) -> Tensor:
        return feature[:, rows[:, None], cols[None, :]]

    value = (
        (hy[:, None] * hx[None, :]) * at(y_low, x_low)
        + (hy[:, None] * lx[None, :]) * at(y_low, x_high)
        + (ly[:, None] * hx[None, :]) * at(y_high, x_low)
        + (ly[:, None] * lx[None, :]) * at(y_high, x_high)
    )
    inside = y_ok[:, None] & x_ok[None, :]
    return torch.where(inside, value, torch.zeros((), dtype=value.dtype))


def _clamped_axis(coords: Tensor, size: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Low and high pixel, fraction towards high, and validity of each coordinate along one axis."""
    ok = (coords >= -1) & (coords <= size)
    c = coords.clamp(min=0)
    low = c.to(torch.int64)  # truncation = floor, since c >= 0
    at_edge = low >= size - 1
    low = torch.where(at_edge, size - 1, low)
    high = torch.where(at_edge, size - 1, low + 1)
    c = torch.where(at_edge, low.to(c.dtype), c)
    # Out-of-range coordinates get a harmless in-range index; their samples are zeroed by the caller.
    low, high = low.clamp(0, size - 1), high.clamp(0, size - 1)
    return low, high, c - low.to(c.dtype), ok


def _bin_sample_points(start: Tensor, bin_size: Tensor, bins: int, grid: int) -> Tensor:
    """Sample coordinates [bins * grid]: `grid` evenly spaced points inside each of `bins` bins."""
    dtype = start.dtype
    bin_index = torch.arange(bins, dtype=dtype)[:, None]
    sample = torch.arange(grid, dtype=dtype)[None, :]
    return (start + bin_index * bin_size + (sample + 0.5) * bin_size / grid).reshape(-1)


def _sampled_bins(feature: Tensor, start_h: Tensor, start_w: Tensor, roi_height: Tensor, roi_width: Tensor,
                  pooled_height: int, pooled_width: int, sampling_ratio: int) -> tuple[Tensor, int]:
    """Sum of the bilinear samples in each bin [C, PH, PW], and the samples per bin (may be <= 0)."""
    bin_h, bin_w = roi_height / pooled_height, roi_width / pooled_width
    grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil((roi_height / pooled_height).item())
    grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil((roi_width / pooled_width).item())
    channels = feature.shape[0]
    if grid_h <= 0 or grid_w <= 0:
        return feature.new_zeros(channels, pooled_height, pooled_width), grid_h * grid_w
    ys = _bin_sample_points(start_h, bin_h, pooled_height, grid_h)
    xs = _bin_sample_points(start_w, bin_w, pooled_width, grid_w)
    samples = _roi_align_sample(feature, ys, xs).reshape(channels, pooled_height, grid_h, pooled_width, grid_w)
    return samples.sum(dim=(2, 4)), grid_h * grid_w


# ---------------------------------------------------------------------------------------------- roi_align


def reference_roi_align(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
                        sampling_ratio: int, aligned: bool) -> Tensor:
    """Each bin is the mean of a grid of bilinear samples; rois are (batch_index, x1, y1, x2, y2)."""
    _check_rois("roi_align", input, rois, pooled_height, pooled_width)
    offset = 0.5 if aligned else 0.0
    outputs = []
    for roi in rois:
        feature = input[_batch_index("roi_align", roi, input.shape[0])]
        start_w, start_h, end_w, end_h = (_scaled(v, spatial_scale) - offset for v in roi[1:])
        roi_width, roi_height = end_w - start_w, end_h - start_h
        if not aligned:  # the legacy mode makes degenerate rois 1x1
            roi_width, roi_height = roi_width.clamp(min=1), roi_height.clamp(min=1)
        sums, count = _sampled_bins(feature, start_h, start_w, roi_height, roi_width, pooled_height, pooled_width,
                                    sampling_ratio)
        outputs.append(sums / max(count, 1))
    return _stack(outputs, input, input.shape[1], pooled_height, pooled_width)


def reference_ps_roi_align(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                           pooled_width: int, sampling_ratio: int) -> tuple[Tensor, Tensor]:
    """Position-sensitive RoIAlign: bin (ph, pw) of output channel c reads input channel
    (c * PH + ph) * PW + pw. Always half-pixel aligned, no minimum roi size, and (as torchvision) the mean
    divides by the raw sample count, so an empty sampling grid gives NaN."""
    _check_rois("ps_roi_align", input, rois, pooled_height, pooled_width)
    channels_out = _channels_out("ps_roi_align", input, pooled_height, pooled_width)
    outputs = []
    for roi in rois:
        feature = input[_batch_index("ps_roi_align", roi, input.shape[0])]
        start_w, start_h, end_w, end_h = (_scaled(v, spatial_scale) - 0.5 for v in roi[1:])
        sums, count = _sampled_bins(feature, start_h, start_w, end_h - start_h, end_w - start_w, pooled_height,
                                    pooled_width, sampling_ratio)
        outputs.append(_position_sensitive(sums / count, channels_out, pooled_height, pooled_width))
    output = _stack(outputs, input, channels_out, pooled_height, pooled_width)
    return output, _channel_mapping(rois.shape[0], channels_out, pooled_height, pooled_width)


def _channels_out(op: str, input: Tensor, pooled_height: int, pooled_width: int) -> int:
    bins = pooled_height * pooled_width
    if input.shape[1] % bins != 0:
        _fail(op, f"input channels ({input.shape[1]}) must be a multiple of pooled_height * pooled_width ({bins})")
    return input.shape[1] // bins


def _position_sensitive(pooled: Tensor, channels_out: int, pooled_height: int, pooled_width: int) -> Tensor:
    """From every input channel's bins [C_out * PH * PW, PH, PW], keep bin b of input channel c * PH * PW + b."""
    bins = pooled_height * pooled_width
    per_bin = pooled.reshape(channels_out, bins, bins).diagonal(dim1=1, dim2=2)
    return per_bin.reshape(channels_out, pooled_height, pooled_width)


def _channel_mapping(num_rois: int, channels_out: int, pooled_height: int, pooled_width: int) -> Tensor:
    mapping = torch.arange(channels_out * pooled_height * pooled_width, dtype=INDEX_DTYPE)
    return mapping.reshape(1, channels_out, pooled_height, pooled_width).repeat(num_rois, 1, 1, 1)


def _stack(outputs: list[Tensor], input: Tensor, channels: int, pooled_height: int, pooled_width: int) -> Tensor:
    if not outputs:
        return input.new_zeros(0, channels, pooled_height, pooled_width)
    return torch.stack(outputs)


# ---------------------------------------------------------------------------------------- pooling ops


def _quantised_bins(origin: int, extent: int, bins: int, limit: int, dtype: torch.dtype) -> list[tuple[int, int]]:
    """RoIPool's [start, end) per bin: bin i covers floor(i * size) .. ceil((i + 1) * size) pixels from the
    roi's origin, size = extent / bins in the input's dtype, clipped to [0, limit]."""
    size = torch.tensor(extent, dtype=dtype) / bins
    ranges = []
    for i in range(bins):
        start = int(torch.floor(i * size).item()) + origin
        end = int(torch.ceil((i + 1) * size).item()) + origin
        ranges.append((min(max(start, 0), limit), min(max(end, 0), limit)))
    return ranges


def _rounded_corners(roi: Tensor, spatial_scale: float) -> tuple[int, int, int, int]:
    return tuple(_round_half_away(_scaled(v, spatial_scale)) for v in roi[1:])  # type: ignore[return-value]


def reference_roi_pool(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                       pooled_width: int) -> tuple[Tensor, Tensor]:
    """Max over each quantised bin of the rounded roi (which includes both corner pixels). Also returns the
    argmax as an index into H * W (first maximum in row-major order), int32; an empty bin is 0 with -1."""
    _check_rois("roi_pool", input, rois, pooled_height, pooled_width)
    num_rois, (channels, height, width) = rois.shape[0], input.shape[1:]
    output = input.new_zeros(num_rois, channels, pooled_height, pooled_width)
    argmax = torch.full((num_rois, channels, pooled_height, pooled_width), -1, dtype=INDEX_DTYPE)
    for k, roi in enumerate(rois):
        feature = input[_batch_index("roi_pool", roi, input.shape[0])]
        x1, y1, x2, y2 = _rounded_corners(roi, spatial_scale)
        rows = _quantised_bins(y1, max(y2 - y1 + 1, 1), pooled_height, height, input.dtype)
        cols = _quantised_bins(x1, max(x2 - x1 + 1, 1), pooled_width, width, input.dtype)
        for ph, (h0, h1) in enumerate(rows):
            for pw, (w0, w1) in enumerate(cols):
                if h1 <= h0 or w1 <= w0:
                    continue
                region = feature[:, h0:h1, w0:w1].reshape(channels, -1)
                local = torch.argmax(region, dim=1)  # first maximum, as the kernel's strict `>`
                output[k, :, ph, pw] = region.gather(1, local[:, None])[:, 0]
                row, col = local // (w1 - w0) + h0, local % (w1 - w0) + w0
                argmax[k, :, ph, pw] = (row * width + col).to(INDEX_DTYPE)
    return output, argmax


def reference_ps_roi_pool(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                          pooled_width: int) -> tuple[Tensor, Tensor]:
    """Position-sensitive mean over quantised bins. Unlike roi_pool (and as torchvision does), the roi extent
    has no +1 and bins are clipped to [0, size - 1], so the last row and column are never pooled."""
    _check_rois("ps_roi_pool", input, rois, pooled_height, pooled_width)
    channels_out = _channels_out("ps_roi_pool", input, pooled_height, pooled_width)
    height, width = input.shape[2:]
    output = input.new_zeros(rois.shape[0], channels_out, pooled_height, pooled_width)
    for k, roi in enumerate(rois):
        feature = input[_batch_index("ps_roi_pool", roi, input.shape[0])]
        x1, y1, x2, y2 = _rounded_corners(roi, spatial_scale)
        rows = _quantised_bins(y1, max(y2 - y1, 1), pooled_height, height - 1, input.dtype)
        cols = _quantised_bins(x1, max(x2 - x1, 1), pooled_width, width - 1, input.dtype)
        for ph, (h0, h1) in enumerate(rows):
            for pw, (w0, w1) in enumerate(cols):
                if h1 <= h0 or w1 <= w0:
                    continue
                channels = torch.arange(channels_out) * pooled_height * pooled_width + ph * pooled_width + pw
                region = feature[channels, h0:h1, w0:w1]
                output[k, :, ph, pw] = region.sum(dim=(1, 2)) / ((h1 - h0) * (w1 - w0))
    return output, _channel_mapping(rois.shape[0], channels_out, pooled_height, pooled_width)


# ------------------------------------------------------------------------------------------ deform_conv2d


def reference_deform_conv2d(input: Tensor, weight: Tensor, offset: Tensor, mask: Tensor, bias: Tensor,
                            stride_h: int, stride_w: int, pad_h: int, pad_w: int, dilation_h: int,
                            dilation_w: int, groups: int, offset_groups: int, use_mask: bool) -> Tensor:
    """Convolution whose kernel tap (i, j) at output (oy, ox) reads the input, zero-padded and bilinearly
    sampled, at (oy * stride - pad + i * dilation + dy, ox * stride - pad + j * dilation + dx), with (dy, dx)
    from `offset` per offset group, times `mask` when use_mask."""
    batch, channels, height, width = input.shape
    out_channels, group_channels, kernel_h, kernel_w = weight.shape
    out_h = (height + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) // stride_h + 1
    out_w = (width + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) // stride_w + 1
    taps = kernel_h * kernel_w
    if group_channels * groups != channels or out_channels % groups or channels % offset_groups:
        _fail("deform_conv2d", f"weight {list(weight.shape)} does not fit input {list(input.shape)} with "
              f"groups={groups}, offset_groups={offset_groups}")
    if list(offset.shape) != [batch, 2 * offset_groups * taps, out_h, out_w]:
        _fail("deform_conv2d", f"offset must have shape {[batch, 2 * offset_groups * taps, out_h, out_w]}, "
              f"got {list(offset.shape)}")
    if out_h <= 0 or out_w <= 0 or batch == 0:
        return input.new_zeros(batch, out_channels, max(out_h, 0), max(out_w, 0))

    # Sampling positions [B, offset_groups, kh, kw, outH, outW].
    offset = offset.reshape(batch, offset_groups, kernel_h, kernel_w, 2, out_h, out_w)
    base_y = torch.arange(out_h)[None, :] * stride_h - pad_h + torch.arange(kernel_h)[:, None] * dilation_h
    base_x = torch.arange(out_w)[None, :] * stride_w - pad_w + torch.arange(kernel_w)[:, None] * dilation_w
    ys = base_y[:, None, :, None] + offset[:, :, :, :, 0]
    xs = base_x[None, :, None, :] + offset[:, :, :, :, 1]

    # Each input channel sampled at its offset group's positions: [B, C, kh * kw, outH * outW].
    grouped_input = input.reshape(batch, offset_groups, channels // offset_groups, height, width)
    columns = _sample_zero_padded(grouped_input, ys, xs).reshape(batch, channels, taps, out_h * out_w)
    if use_mask:
        mask = mask.reshape(batch, offset_groups, 1, taps, out_h * out_w)
        columns = (mask * columns.reshape(batch, offset_groups, -1, taps, out_h * out_w)).reshape(columns.shape)

    columns = columns.reshape(batch, groups, group_channels * taps, out_h * out_w)
    weight = weight.reshape(groups, out_channels // groups, group_channels * taps)
    out = torch.einsum("gok,bgkl->bgol", weight, columns).reshape(batch, out_channels, out_h, out_w)
    return out + bias.reshape(1, out_channels, 1, 1)


def _sample_zero_padded(maps: Tensor, ys: Tensor, xs: Tensor) -> Tensor:
    """Bilinear samples of maps [B, G, Cg, H, W] at ys, xs [B, G, *P] -> [B, G, Cg, *P]. Pixels outside the map
    count as 0, so a point within one pixel outside blends the edge with zeros; farther out (or NaN) gives 0."""
    batch, groups, group_channels, height, width = maps.shape
    points = ys.shape[2:]
    ys, xs = ys.reshape(batch, groups, -1), xs.reshape(batch, groups, -1)
    inside = (ys > -1) & (ys < height) & (xs > -1) & (xs < width)
    y0, x0 = torch.floor(ys), torch.floor(xs)
    ly, lx = ys - y0, xs - x0
    hy, hx = 1 - ly, 1 - lx
    flat = maps.reshape(batch, groups, group_channels, height * width)

    def corner(rows: Tensor, cols: Tensor) -> Tensor:
        valid = inside & (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
        index = torch.where(valid, rows * width + cols, torch.zeros_like(rows)).to(torch.int64)
        values = flat.gather(3, index[:, :, None, :].expand(-1, -1, group_channels, -1))
        return torch.where(valid[:, :, None, :], values, torch.zeros((), dtype=values.dtype))

    value = (
        (hy * hx)[:, :, None] * corner(y0, x0)
        + (hy * lx)[:, :, None] * corner(y0, x0 + 1)
        + (ly * hx)[:, :, None] * corner(y0 + 1, x0)
        + (ly * lx)[:, :, None] * corner(y0 + 1, x0 + 1)
    )
    value = torch.where(inside[:, :, None], value, torch.zeros((), dtype=value.dtype))
    return value.reshape(batch, groups, group_channels, *points)


REFERENCES = {
    "nms": reference_nms,
    "roi_align": reference_roi_align,
    "roi_pool": reference_roi_pool,
    "ps_roi_align": reference_ps_roi_align,
    "ps_roi_pool": reference_ps_roi_pool,
    "deform_conv2d": reference_deform_conv2d,
}
