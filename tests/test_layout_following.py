"""Channels_last through the operations between sites (bind_time/weight_sites.h's is_layout_following, and
pooling_layout.h's AvgPoolLayoutKernel): a site's result stays channels_last where it only reaches other sites
through additions, products, relu or hardtanh (whose values are the same bit for bit in any layout) or an
adaptive_avg_pool2d checked per shape, so oneDNN's kernels skip the reorders into and out of their layout. A
value computed from it that reaches anything else (what the model returns, a view) keeps the stock layout.
Each test fails when the layout is not given where it may be, or is given where it must not be."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from predictor_runner import run_predictor
from test_bind_time_kernels import save_frozen


def run(predictor: Path, model: Path, out: Path, *args: object) -> dict:
    done = run_predictor(predictor, model, "--iters", "3", "--warmup", "0", "--json", "--save-outputs", out, *args)
    assert done.returncode == 0, done.stderr + done.stdout
    report = done.json()
    assert report["outputs_match"] is True, report["mismatch"]  # eager's, within 1e-5
    return report


def layouts(report: dict) -> list[str]:
    return [site["result_layout"] for site in report["specialized_sites"]]


@pytest.mark.parametrize("op", ["relu", "relu_", "hardtanh", "hardtanh_", "add", "sub", "mul", "add_", "mul_"])
def test_the_layout_following_operators_give_the_same_bits_in_either_layout(op: str) -> None:
    # The premise of the rule, on the kernels the generated code calls: NaN, -0.0 and infinities included, at
    # sizes whose element counts leave a scalar tail after the vectorised loop.
    generator = torch.Generator().manual_seed(0)
    for shape in [(1, 7, 5, 3), (2, 13, 9, 11), (1, 64, 28, 28)]:
        a = torch.randn(shape, generator=generator)
        b = torch.randn(shape, generator=generator)
        for t in (a, b):
            flat = t.view(-1)
            picks = torch.randint(0, flat.numel(), (flat.numel() // 5,), generator=generator)
            flat[picks[0::3]], flat[picks[1::3]], flat[picks[2::3]] = float("nan"), -0.0, float("-inf")
        compute = {
            "relu": lambda x, y: torch.relu(x), "relu_": lambda x, y: x.clone().relu_(),
            "hardtanh": lambda x, y: F.hardtanh(x, 0.0, 6.0), "hardtanh_": lambda x, y: F.hardtanh(x.clone(), 0.0, 6.0, True),
            "add": torch.add, "sub": torch.sub, "mul": torch.mul,
            "add_": lambda x, y: x.clone().add_(y), "mul_": lambda x, y: x.clone().mul_(y),
        }[op]
        stock = compute(a, b).contiguous()
        last = compute(a.contiguous(memory_format=torch.channels_last), b).contiguous()
        assert torch.equal(stock.view(torch.int32), last.view(torch.int32)), shape


class ResidualBlock(torch.nn.Module):
    """ResNet's basic block frozen: conv, relu, conv, `out += identity`, relu; then a conv and what the model
    returns."""

    def __init__(self, returns: str) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.head = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.returns = returns

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv2(torch.relu(self.conv1(x)))
        out += x
        out = torch.relu(out)
        if self.returns == "sum":  # what the add computes is returned: conv2 keeps the stock layout
            return out
        if self.returns == "view":  # a view of it: a view minds layouts
            return out.view(-1)
        return self.head(out)


def block_input(seed: int) -> torch.Tensor:
    return torch.randn((1, 32, 56, 56), generator=torch.Generator().manual_seed(seed))


def check_new_values(predictor: Path, model: Path, module: torch.nn.Module, tmp_path: Path) -> dict:
    fresh = block_input(7)
    torch.save([fresh], tmp_path / "fresh.pt")
    with torch.no_grad():
        torch.save([module(fresh)], tmp_path / "fresh.expected.pt")
    return run(predictor, model, tmp_path / "fresh_out.pt", "--input", tmp_path / "fresh.pt",
               "--expected", tmp_path / "fresh.expected.pt")


def test_a_result_reaching_the_next_conv_through_add_and_relu_stays_channels_last(predictor: Path, tmp_path: Path) -> None:
    module = ResidualBlock("conv").eval()
    model = save_frozen(module, [block_input(0)], tmp_path / "block.ptl")
    report = run(predictor, model, tmp_path / "on.pt")
    # conv1 feeds conv2 only; conv2's result reaches the head conv through add_ and relu_; the head's is returned.
    assert layouts(report) == ["channels_last", "channels_last", "contiguous"]
    out = torch.load(tmp_path / "on.pt")
    assert out.is_contiguous(), "the model returns the stock layout"
    again = check_new_values(predictor, model, module, tmp_path)
    assert [site["specialized_calls"] for site in again["specialized_sites"]] == [4, 4, 4]


@pytest.mark.parametrize("returns", ["sum", "view"])
def test_a_result_computed_on_to_what_the_model_returns_keeps_the_stock_layout(
    returns: str, predictor: Path, tmp_path: Path
) -> None:
    module = ResidualBlock(returns).eval()
    model = save_frozen(module, [block_input(0)], tmp_path / "block.ptl")
    report = run(predictor, model, tmp_path / "on.pt")
    # conv2's input came channels_last from conv1: its result is made contiguous, as the stock kernels give it.
    assert layouts(report) == ["channels_last", "contiguous"]
    out = torch.load(tmp_path / "on.pt")
    assert out.is_contiguous()
    check_new_values(predictor, model, module, tmp_path)


class SqueezeExcitation(torch.nn.Module):
    """EfficientNet's block middle: a depthwise conv + SiLU whose result is pooled (squeeze), gated by two 1x1
    convs (excitation), multiplied back, and projected by a 1x1 conv."""

    def __init__(self) -> None:
        super().__init__()
        self.depthwise = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.fc1 = torch.nn.Conv2d(32, 8, 1)
        self.fc2 = torch.nn.Conv2d(8, 32, 1)
        self.project = torch.nn.Conv2d(32, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.depthwise(x), inplace=True)
        scale = torch.sigmoid(self.fc2(F.silu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))
        return self.project(scale * x)


def test_a_squeeze_excitation_block_keeps_the_depthwise_result_channels_last(predictor: Path, tmp_path: Path) -> None:
    module = SqueezeExcitation().eval()
    model = save_frozen(module, [block_input(0)], tmp_path / "se.ptl")
    report = run(predictor, model, tmp_path / "on.pt")
    depthwise = report["specialized_sites"][0]
    assert depthwise["fused"] == ["aten::conv2d", "aten::silu_"] and depthwise["result_layout"] == "channels_last"
    (pool,) = report["layout_calls"]
    assert pool["op"] == "aten::adaptive_avg_pool2d"
    assert pool["channels_last_calls"] > 0, "the pool must take the channels_last map where the results agree"
    assert torch.load(tmp_path / "on.pt").is_contiguous()
    check_new_values(predictor, model, module, tmp_path)
    off = run(predictor, model, tmp_path / "off.pt", "--no-specialize")
    assert off["layout_calls"] == []
    # The text report names the pool as what it is (it once called every layout call site a max_pool2d).
    text = run_predictor(predictor, model, "--iters", "1").stdout
    assert "bind-time: 1 adaptive_avg_pool2d call site(s) pool a site's channels_last result" in text, text
    assert "max_pool2d" not in text, text


@pytest.mark.parametrize("returns", ["sum", "conv"])
def test_a_callers_channels_last_input_gives_the_stock_layouts_back(
    returns: str, predictor: Path, tmp_path: Path
) -> None:
    # Given channels_last inputs, the stock kernels carry that layout through: a site whose result reaches what
    # the model returns must then give it channels_last too, though with stock inputs it would be contiguous.
    module = ResidualBlock(returns).eval()
    x = block_input(0).contiguous(memory_format=torch.channels_last)
    model = save_frozen(module, [x], tmp_path / "block.ptl")
    on = run(predictor, model, tmp_path / "on.pt")
    off = run(predictor, model, tmp_path / "off.pt", "--no-specialize")
    a, b = torch.load(tmp_path / "on.pt"), torch.load(tmp_path / "off.pt")
    assert a.stride() == b.stride() and b.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert all(site["specialized_calls"] > 0 for site in on["specialized_sites"]), on["specialized_sites"]
    assert off["specialized_sites"] == []
