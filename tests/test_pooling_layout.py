"""max_pool2d in the layout LibTorch runs it fast in (bind_time/pooling_layout.h): a contiguous 4-d float input is
pooled as a channels_last copy where that is faster, a stem conv's result feeding the pool is made channels_last by
its site, and the result always comes back in the layout the stock kernel gives it, with the same values bit for
bit. Each test fails if the pool is not re-bound, if its values or layout differ from the stock run's, or if a
caller's channels_last input loses its layout."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from predictor_runner import run_predictor
from test_bind_time_kernels import later_runs, save_frozen


class StemThenPool(torch.nn.Module):
    """ResNet's stem: a 7x7 stride-2 conv, relu, 3x3 stride-2 max pool, then a conv."""

    def __init__(self, conv_first: bool) -> None:
        super().__init__()
        self.conv_first = conv_first
        self.stem = torch.nn.Conv2d(3, 64, 7, 2, 3)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.conv = torch.nn.Conv2d(64, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.conv_first:
            x = torch.relu(self.stem(x))
        return self.conv(self.pool(x))


def run(predictor: Path, model: Path, out: Path, *args: object) -> dict:
    done = run_predictor(predictor, model, "--iters", "3", "--warmup", "0", "--json", "--save-outputs", out, *args)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.json()


@pytest.mark.parametrize("conv_first", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_max_pool_runs_channels_last_and_gives_the_stock_values_and_layout(
    conv_first: bool, layout: str, predictor: Path, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 3 if conv_first else 64, 224 if conv_first else 112, 224 if conv_first else 112)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    model = save_frozen(StemThenPool(conv_first), [x], tmp_path / "pool.ptl")
    on = run(predictor, model, tmp_path / "on.pt")
    off = run(predictor, model, tmp_path / "off.pt", "--no-specialize")
    assert on["outputs_match"] is True, on["mismatch"]
    (pool,) = on["layout_calls"]
    assert pool["op"] == "aten::max_pool2d"
    assert pool["channels_last_calls"] + pool["stock_calls"] > 0
    if layout == "contiguous":
        # The first run (before the background preparation run) gets the stock layout from its generated conv
        # sites, and its pool, untimed, takes a channels_last copy of a 64-channel map (the layout usually
        # faster); the preparation run and the runs after it channels_last (kept untimed: conftest's no-race hook).
        assert on["background_preparation"]["runs"] == 1
        assert (pool["stock_calls"], pool["channels_last_calls"]) == (0, 2 + later_runs(on)), pool
    assert off["layout_calls"] == []
    a, b = torch.load(tmp_path / "on.pt"), torch.load(tmp_path / "off.pt")
    assert a.stride() == b.stride()
    if not conv_first:  # the pool is the first op: what the next conv gets is the pool's own result
        assert a.is_contiguous() == (layout == "contiguous")
    sites = [site for site in on["call_sites"] if site["op"] == "aten::max_pool2d"]
    assert [site["runs"] for site in sites] == ["static+channels_last"]


class PoolOnly(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max_pool2d(x, [3, 3], [2, 2], [1, 1])


def test_a_pooled_result_is_the_stock_kernels_bit_for_bit(predictor: Path, tmp_path: Path) -> None:
    torch.manual_seed(1)
    x = torch.randn(2, 32, 64, 64)
    x[0, 0, :4, :4] = float("nan")
    x[1, 1, :8, :8] = -0.0
    # Windows holding both zeros: the kernels must keep the same one of two equal values.
    zeros = torch.where(torch.rand(2, 32, 32, 32) < 0.5, torch.tensor(0.0), torch.tensor(-0.0))
    x[:, :, 16:48, 16:48] = zeros
    model = save_frozen(PoolOnly(), [x], tmp_path / "pool.ptl")
    (tmp_path / "pool.expected.pt").unlink()  # NaN never equals itself there: compared below instead
    on = run(predictor, model, tmp_path / "on.pt")
    run(predictor, model, tmp_path / "off.pt", "--no-specialize")
    a, b = torch.load(tmp_path / "on.pt"), torch.load(tmp_path / "off.pt")
    assert a.is_contiguous() and b.is_contiguous()
    assert torch.equal(a.isnan(), b.isnan())
    assert torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))
    assert torch.equal(torch.signbit(a), torch.signbit(b))
    (pool,) = on["layout_calls"]
    # No site, so no preparation run follows: every call is timed (kept channels_last: conftest's no-race hook).
    assert (pool["stock_calls"], pool["channels_last_calls"]) == (0, 1 + later_runs(on)), pool


def test_a_stem_on_its_generated_kernels_still_hands_the_pool_a_channels_last_map(
    predictor: Path, tmp_path: Path
) -> None:
    # Every partition compiled wrong (test hook): each site falls back to its generated kernels. The stem's result
    # only reaches the pool and the next conv, so it is planned channels_last; the generated conv on the caller's
    # contiguous image makes it contiguous, and the site must lay it out as planned, or the pool pools a copy and
    # hands the next conv a contiguous map (the strides its note names).
    from test_stage_correctness import run_with_wrong_weights

    torch.manual_seed(2)
    x = torch.randn(1, 3, 224, 224)
    model = save_frozen(StemThenPool(conv_first=True), [x], tmp_path / "stem.ptl")
    run, report = run_with_wrong_weights(predictor, model)
    assert run.returncode == 0, run.stderr
    assert report["outputs_match"] is True, report["mismatch"]
    stem, conv = report["specialized_sites"]
    assert stem["result_layout"] == "channels_last"
    assert stem["specialized_calls"] == 0 and conv["specialized_calls"] == 0
    assert conv["notes"][0].startswith("input [1, 64, 56, 56] strides [200704, 1, 3584, 64] Float:"), conv["notes"]
    (pool,) = report["layout_calls"]
    # Every call channels_last (the first run's, the preparation run's and the later ones): the first run's too,
    # on the stock layout every site gives before the preparation run, pools a channels_last copy of the map.
    assert (pool["stock_calls"], pool["channels_last_calls"]) == (0, 2 + later_runs(report)), pool



class ConvThenPool(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max_pool2d(self.conv(x), [3, 3], [2, 2], [1, 1])


@pytest.mark.parametrize("channels, first_call", [(4, "stock"), (16, "channels_last")])
def test_the_first_call_before_the_preparation_run_takes_the_layout_its_map_is_faster_in(
    channels: int, first_call: str, predictor: Path, tmp_path: Path
) -> None:
    # The conv site makes a background preparation run follow the first run, so the pool's first call is left
    # untimed: a channels_last copy of 16 channels, the stock layout for 4 (the copy is slower there). The
    # preparation run and the later calls are channels_last (kept untimed by conftest's no-race hook).
    torch.manual_seed(3)
    model = save_frozen(ConvThenPool(channels), [torch.randn(1, 3, 112, 112)], tmp_path / "pool.ptl")
    on = run(predictor, model, tmp_path / "on.pt")
    assert on["outputs_match"] is True, on["mismatch"]
    assert on["background_preparation"]["runs"] == 1
    (pool,) = on["layout_calls"]
    first_stock = 1 if first_call == "stock" else 0
    assert (pool["stock_calls"], pool["channels_last_calls"]) == (first_stock, 2 - first_stock + later_runs(on)), pool
