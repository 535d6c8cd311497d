"""Differential testing of the bind-time stage: seeded random TorchScript models, run with the stage and without.

    python tests/differential_models.py --count 200 --first-seed 0 --jobs 2     # a summary of 200 models
    python tests/differential_models.py --show 17                              # model 17's source, to read

Each seed makes one small model, written as the Python source of an nn.Module class (a failing case reads like
code), built from the patterns the stage rewrites and the ones that could fool its proofs: convs with relu,
hardtanh (ReLU6), silu, hardswish, gelu, sigmoid, tanh (one or two in a row) or a residual add right after
them (`other + conv(x)`, `conv(x) + other`, `out += other` on the conv's result, `other += conv(x)` writing a map
later code may still read), 1x1 convs feeding 3x3 depthwise ones, linears, pools, elementwise operators, views and reshapes (view, reshape, permute, flatten), in-place operators on intermediate
values (on conv results, on views of them, on list and tuple elements), lists and tuples, loops and branches on
shapes and on input values, values that depend only on shapes (the stage folds them), random-number operators,
and module attributes read and written in forward. The model is scripted and saved for the lite interpreter
frozen (the stage's conv and linear sites need constant weights) and unfrozen, with a sequence of inputs: three
values at one shape, two at another, one at the first again.

Each saved model goes to build/differential_check (tests/cpp/differential_check.cpp), which compares every output
of the model loaded with the stage (background and first-call preparation, 1 caller thread and 4 at once) with
the model loaded without it. The summary counts models, inputs, runs, comparisons and disagreements; a model
that fails to script, save, load or run is a failure too (the generator's bug: it only uses operators the build
has, from `lite_predictor --list-ops`), except for the generator's own rejections (an eager run whose outputs are
not finite), counted apart. Failing cases are kept with their source under --keep-dir.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

BUILD_DIR = Path(os.environ.get("LD_TEST_BUILD_DIR", REPO_ROOT / "build")).resolve()
HARNESS = BUILD_DIR / "differential_check"
PREDICTOR = BUILD_DIR / "lite_predictor"
HARNESS_TIMEOUT_S = 300.0

# --- which operators the build has


@lru_cache(maxsize=1)
def available_ops(predictor: Path = PREDICTOR) -> frozenset[str]:
    """The operators a model may call: those the build has kernels for, and the ones the interpreter implements."""
    from tools.jit_ops import dispatcher_has_operator, jit_operator_names

    listed = subprocess.run([str(predictor), "--list-ops"], capture_output=True, text=True, check=True).stdout
    generated = {line.strip() for line in listed.splitlines() if line.strip()}
    jit_native = {name for name in jit_operator_names() if not dispatcher_has_operator(name)}
    return frozenset(generated | jit_native)


# --- the generator


@dataclass
class Var:
    """A tensor the forward being written holds in a local variable."""

    name: str
    kind: str  # "map": [N, C, H, W]; "vec": [N, C]
    channels: int
    spatial: str  # maps of the same spatial id have the same H and W ("one": 1x1, broadcasts)
    downsampled: int = 0  # stride-2 steps since the input (inputs are at least 8 pixels)
    from_input: bool = False  # the input or a view of it: never written (branches read the input's values)
    from_conv: bool = False
    fixed: bool = False  # depends only on shapes and constants: the stage may fold it


@dataclass
class GeneratedModel:
    seed: int
    class_name: str
    source: str
    input_shapes: list[tuple[int, ...]]
    features: list[str]  # what the model does, for the summary ("pair", "random", ...)


# Operators each feature emits (frozen or not): a feature whose operators the build lacks is not generated.
FEATURE_OPS: dict[str, tuple[str, ...]] = {
    "conv": ("aten::conv2d",),
    "batch_norm": ("aten::batch_norm",),  # after a conv: bind-time freezing folds it in unfrozen models
    "relu": ("aten::relu", "aten::relu_"),
    "hardtanh": ("aten::hardtanh", "aten::hardtanh_"),
    "relu6": ("aten::relu6",),
    # Activations real models put after a conv or linear, fused into its kernel (gelu's tanh form is not).
    "silu": ("aten::silu", "aten::silu_"),  # unfrozen, F.silu keeps both branches
    "hardswish": ("aten::hardswish", "aten::hardswish_"),
    "gelu": ("aten::gelu",),
    "sigmoid": ("aten::sigmoid", "aten::sigmoid_"),
    "tanh": ("aten::tanh", "aten::tanh_"),
    "add": ("aten::add.Tensor",),
    "pair": ("aten::conv2d",),
    "linear": ("aten::linear", "aten::mean.dim"),
    "pool": ("aten::max_pool2d", "aten::avg_pool2d"),
    "global_pool": ("aten::mean.dim", "aten::adaptive_avg_pool2d"),
    "unary": ("aten::sigmoid", "aten::tanh", "aten::abs", "aten::neg"),
    "binary": ("aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::mul.Scalar", "aten::add.Scalar"),
    "inplace": ("aten::add_.Tensor", "aten::add_.Scalar", "aten::mul_.Tensor", "aten::mul_.Scalar",
                "aten::clamp_", "aten::relu_", "aten::sigmoid_", "aten::tanh_", "aten::sub_.Tensor"),
    "copy": ("aten::copy_",),
    "view": ("aten::view", "aten::size"),
    "reshape": ("aten::reshape", "aten::size"),
    "permute": ("aten::permute", "aten::contiguous"),
    "flatten": ("aten::flatten.using_ints", "aten::view", "aten::reshape"),
    "select": ("aten::select.int", "aten::slice.Tensor"),
    "list": ("aten::append.t", "aten::__getitem__.t", "aten::list.t", "aten::len.t", "aten::cat"),
    "tuple": (),
    "loop": (),
    "branch": ("aten::sum", "aten::gt.Scalar", "aten::Bool.Tensor", "aten::size"),
    "fixed": ("aten::zeros", "aten::ones", "aten::full", "aten::arange", "aten::to.dtype", "aten::size"),
    "random": ("aten::randn", "aten::rand", "aten::rand_like", "aten::randn_like", "aten::dropout",
               "aten::bernoulli.p", "aten::bernoulli"),
    "attribute_read": ("aten::mul.Tensor",),
    "attribute_write": ("aten::add.int",),
}


class ModelWriter:
    """Writes one random model: __init__'s submodules and attributes, forward's lines, the variables in scope."""

    def __init__(self, seed: int, ops: frozenset[str]):
        self.rng = random.Random(seed)
        self.seed = seed
        self.features_on = {f for f, needed in FEATURE_OPS.items() if all(op in ops for op in needed)}
        # Per model: whether it calls view at all (a model without views lets the stage keep channels_last
        # results that only reach permute/reshape/append).
        self.uses_view = self.rng.random() < 0.5 and "view" in self.features_on
        self.init_lines: list[str] = []
        self.lines: list[str] = []
        self.indent = 2
        self.counter = 0
        self.spatial_counter = 0
        self.features: set[str] = set()
        self.channels_in = self.rng.choice([3, 4, 8])
        self.vars: list[Var] = [Var("x", "map", self.channels_in, "s0", from_input=True)]
        self.has_counter = False
        self.has_state = False

    # -- helpers

    def on(self, feature: str) -> bool:
        return feature in self.features_on

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def new_spatial(self) -> str:
        self.spatial_counter += 1
        return f"s{self.spatial_counter}"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def submodule(self, line: str) -> str:
        name = f"m{len(self.init_lines)}"
        self.init_lines.append(f"self.{name} = {line}")
        return name

    def maps(self, **filters) -> list[Var]:
        out = [v for v in self.vars if v.kind == "map"]
        for key, value in filters.items():
            out = [v for v in out if getattr(v, key) == value]
        return out

    def pick_map(self, writable: bool = False) -> Var:
        candidates = [v for v in self.maps() if v.spatial != "one" or self.rng.random() < 0.2]
        if writable:
            candidates = [v for v in candidates if not v.from_input]
        candidates = candidates or self.maps()
        # Recent values more often: they make chains, which is what the stage fuses.
        weights = [1.0 + 3.0 * (i >= len(candidates) - 3) for i in range(len(candidates))]
        return self.rng.choices(candidates, weights)[0]

    def add_var(self, var: Var) -> Var:
        self.vars.append(var)
        return var

    def like(self, base: Var, name: str, **changes) -> Var:
        fields = dict(base.__dict__, name=name, from_input=False, from_conv=False, fixed=False)
        fields.update(changes)
        return self.add_var(Var(**fields))

    def activation(self, expr: str) -> str:
        """`expr` with an activation the stage fuses into the conv (or linear) right before it, or none."""
        choices = ["none", "none"]
        if self.on("relu"):
            choices += ["relu", "relu_"]
        if self.on("hardtanh"):
            choices += ["hardtanh", "hardtanh_"]
        if self.on("relu6"):
            choices += ["relu6"]
        for family, kinds in (("silu", ["silu", "silu_"]), ("hardswish", ["hardswish", "hardswish_"]),
                              ("gelu", ["gelu", "gelu_tanh"]), ("sigmoid", ["sigmoid", "sigmoid_"]),
                              ("tanh", ["tanh", "tanh_"])):
            if self.on(family):
                choices += kinds
        kind = self.rng.choice(choices)
        if kind != "none":
            self.features.add(kind)
        activated = {
            "none": expr,
            "relu": f"torch.relu({expr})",
            "relu_": f"{expr}.relu_()",
            "hardtanh": f"F.hardtanh({expr}, 0.0, 6.0)",
            "hardtanh_": f"torch._C._nn.hardtanh_({expr}, 0.0, 6.0)",
            "relu6": f"F.relu6({expr})",
            "silu": f"F.silu({expr})",
            "silu_": f"F.silu({expr}, inplace=True)",
            "hardswish": f"F.hardswish({expr})",
            "hardswish_": f"F.hardswish({expr}, inplace=True)",
            "gelu": f"F.gelu({expr})",
            "gelu_tanh": f"F.gelu({expr}, approximate='tanh')",
            "sigmoid": f"torch.sigmoid({expr})",
            "sigmoid_": f"{expr}.sigmoid_()",
            "tanh": f"torch.tanh({expr})",
            "tanh_": f"{expr}.tanh_()",
        }[kind]
        # Sometimes a second one on the first's result: the stage fuses a run of them.
        if kind != "none" and self.rng.random() < 0.2:
            return self.activation(activated)
        return activated

    # -- statements: each writes a few lines of forward and may define variables

    def conv(self) -> None:
        src = self.pick_map()
        if src.spatial == "one":
            src = self.vars[0]
        out_c = self.rng.choice([4, 8, 12, 16])
        kernel = self.rng.choice([1, 3, 3])
        stride = 2 if kernel == 3 and src.downsampled < 2 and self.rng.random() < 0.25 else 1
        depthwise = kernel == 3 and stride == 1 and self.rng.random() < 0.3
        groups = src.channels if depthwise else 1
        if depthwise:
            out_c = src.channels
        bias = self.rng.random() < 0.7
        m = self.submodule(
            f"nn.Conv2d({src.channels}, {out_c}, {kernel}, stride={stride}, padding={kernel // 2}, "
            f"groups={groups}, bias={bias})")
        name = self.fresh()
        spatial = src.spatial if stride == 1 else self.new_spatial()
        expr = f"self.{m}({src.name})"
        if self.on("batch_norm") and self.rng.random() < 0.5:
            bn = self.submodule(f"nn.BatchNorm2d({out_c}, affine={self.rng.random() < 0.8})")
            # Statistics far from the identity's, so that a wrong fold shows in every output.
            self.init_lines.append(f"with torch.no_grad(): self.{bn}.running_mean.uniform_(-1, 1); "
                                   f"self.{bn}.running_var.uniform_(0.5, 2)")
            expr = f"self.{bn}({expr})"
            self.features.add("batch_norm")
        residual = [v for v in self.maps() if v.spatial == spatial and v.channels == out_c and v is not src]
        if residual and self.on("add") and self.rng.random() < 0.4:
            other = self.rng.choice(residual)
            self.features.add("residual")
            form = self.rng.random()
            if form < 0.25 and self.on("inplace"):
                # `out += identity` (add_ on the conv's result, the other operand from a register after the call),
                # or `other += conv(...)` (add_ writing the other map, which later code may still read).
                if self.rng.random() < 0.5:
                    self.features.add("residual_inplace_on_result")
                    self.emit(f"{name} = {expr}")
                    self.emit(f"{name} += {other.name}")
                else:
                    self.features.add("residual_inplace_on_other")
                    self.emit(f"{other.name} += {expr}")
                    self.emit(f"{name} = {other.name}")
                if self.rng.random() < 0.3:
                    self.emit(f"{name} = {self.activation(name)}")
                self.features.add("conv")
                self.add_var(Var(name, "map", out_c, spatial, src.downsampled + (stride == 2), from_conv=True))
                return
            expr = f"{other.name} + {expr}" if form < 0.7 else f"{expr} + {other.name}"
            if self.rng.random() < 0.3:
                expr = self.activation(f"({expr})")
        else:
            expr = self.activation(expr)
        self.emit(f"{name} = {expr}")
        self.features.add("conv")
        self.add_var(Var(name, "map", out_c, spatial, src.downsampled + (stride == 2), from_conv=True))

    def pair(self) -> None:
        """A 1x1 conv whose result only feeds a 3x3 depthwise conv (the stage runs both as one kernel)."""
        src = self.pick_map()
        if src.spatial == "one":
            src = self.vars[0]
        mid = self.rng.choice([8, 12, 16])
        stride = 2 if src.downsampled < 2 and self.rng.random() < 0.3 else 1
        pw = self.submodule(f"nn.Conv2d({src.channels}, {mid}, 1, bias={self.rng.random() < 0.5})")
        dw = self.submodule(f"nn.Conv2d({mid}, {mid}, 3, stride={stride}, padding=1, groups={mid}, "
                            f"bias={self.rng.random() < 0.5})")
        t, name = self.fresh("t"), self.fresh()
        self.emit(f"{t} = {self.activation(f'self.{pw}({src.name})')}")
        if self.on("inplace") and self.rng.random() < 0.4:
            # Between the two convs, a write to the pair's input (the fused kernel must not read it late) or to the
            # 1x1 result, directly or through a tuple or list holding it.
            written = t if src.from_input or self.rng.random() < 0.4 else src.name
            self.features.add("pair_result_written" if written == t else "pair_input_written")
            write = self.rng.choice(["mul_(0.5)", "add_(1.0)", "relu_()"])
            how = self.rng.randrange(3)
            if how == 0:
                self.emit(f"{written}.{write}")
            elif how == 1:
                holder = self.fresh("p")
                self.emit(f"{holder} = ({written}, x)")
                self.emit(f"{holder}[0].{write}")
            else:
                holder = self.fresh("l")
                self.emit(f"{holder} = list([{written}])")
                self.emit(f"{holder}[0].{write}")
        self.emit(f"{name} = {self.activation(f'self.{dw}({t})')}")
        self.features.add("pair")
        spatial = src.spatial if stride == 1 else self.new_spatial()
        out = self.add_var(Var(name, "map", mid, spatial, src.downsampled + (stride == 2), from_conv=True))
        if stride == 1 and self.rng.random() < 0.4:
            back = self.submodule(f"nn.Conv2d({mid}, {src.channels}, 1)")
            name2 = self.fresh()
            self.emit(f"{name2} = {src.name} + self.{back}({out.name})")
            self.features.add("residual")
            self.add_var(Var(name2, "map", src.channels, src.spatial, src.downsampled, from_conv=True))

    def linear(self) -> None:
        src = self.pick_map()
        out_f = self.rng.choice([4, 8, 16])
        m = self.submodule(f"nn.Linear({src.channels}, {out_f}, bias={self.rng.random() < 0.8})")
        g, name = self.fresh("g"), self.fresh()
        pooled = self.rng.choice(
            [f"{src.name}.mean([2, 3])", f"torch.flatten(F.adaptive_avg_pool2d({src.name}, 1), 1)"])
        self.emit(f"{g} = {pooled}")
        self.emit(f"{name} = {self.activation(f'self.{m}({g})')}")
        self.features.add("linear")
        vec = self.add_var(Var(name, "vec", out_f, "vec"))
        # Back onto a map of as many channels: a squeeze-excitation product.
        targets = [v for v in self.maps() if v.channels == out_f and v.spatial != "one"]
        if targets and self.rng.random() < 0.6:
            target = self.rng.choice(targets)
            shaped = (f"{vec.name}.view({vec.name}.size(0), {out_f}, 1, 1)" if self.uses_view
                      else f"{vec.name}.reshape([-1, {out_f}, 1, 1])")
            out = self.fresh()
            self.emit(f"{out} = {target.name} * torch.sigmoid({shaped})")
            self.like(target, out)

    def pool(self) -> None:
        src = self.pick_map()
        if src.spatial == "one" or src.downsampled >= 2:
            return
        name = self.fresh()
        op = self.rng.choice(["torch.max_pool2d", "F.avg_pool2d"])
        self.emit(f"{name} = {op}({src.name}, 2, 2)")
        self.features.add("pool")
        self.like(src, name, spatial=self.new_spatial(), downsampled=src.downsampled + 1)

    def global_pool(self) -> None:
        src = self.pick_map()
        name = self.fresh()
        self.emit(f"{name} = " + self.rng.choice(
            [f"{src.name}.mean([2, 3], True)", f"F.adaptive_avg_pool2d({src.name}, 1)"]))
        self.like(src, name, spatial="one")

    def unary(self) -> None:
        src = self.pick_map()
        name = self.fresh()
        op = self.rng.choice(["torch.sigmoid", "torch.tanh", "torch.abs", "torch.neg", "torch.relu"])
        self.emit(f"{name} = {op}({src.name})")
        self.like(src, name)

    def compatible(self, a: Var) -> list[Var]:
        return [v for v in self.vars if v.kind == a.kind and v.channels == a.channels and
                (v.spatial == a.spatial or v.spatial == "one")]

    def binary(self) -> None:
        a = self.pick_map()
        others = self.compatible(a)
        name = self.fresh()
        op = self.rng.choice(["+", "-", "*"])
        if self.rng.random() < 0.3:
            op = "-" if op == "+" else op  # (aten::sub.Scalar is not in the build: x - 0.5 is x + -0.5)
            self.emit(f"{name} = {a.name} {'+' if op == '-' else op} {self.rng.choice(['0.5', '2.0', '-1.5'])}")
        else:
            self.emit(f"{name} = {a.name} {op} {self.rng.choice(others).name}")
        self.like(a, name)

    def inplace(self) -> None:
        """An in-place operator on an intermediate value: a conv result, a view of one, or a plain value."""
        target = self.pick_map(writable=True)
        if target.from_input:
            return
        view = target.name
        if self.rng.random() < 0.5:
            # Through an alias: the write must reach `target` too.
            aliases = [f"{target.name}[0]"]
            if self.on("select"):
                aliases.append(f"{target.name}[:, :1]")
            if self.on("permute"):
                aliases.append(f"{target.name}.permute(0, 2, 3, 1)")
            if self.on("reshape"):
                aliases.append(f"{target.name}.reshape([{target.name}.size(0), -1])")
            if self.uses_view:
                aliases.append(f"{target.name}.view(-1)")
            if self.on("flatten"):
                aliases.append(f"torch.flatten({target.name}, 1)")
            alias = self.fresh("a")
            self.emit(f"{alias} = {self.rng.choice(aliases)}")
            view = alias
            self.features.add("inplace_on_alias")
        others = [v for v in self.compatible(target) if v is not target]
        ops = [f"{view}.add_(1.0)", f"{view}.mul_(0.5)", f"{view}.clamp_(-1.0, 1.0)", f"{view}.relu_()",
               f"{view}.sigmoid_()", f"{view}.tanh_()"]
        if others and view == target.name:
            other = self.rng.choice(others).name
            ops += [f"{view}.add_({other})", f"{view}.mul_({other})", f"{view}.sub_({other})"]
            if self.on("copy") and not self.rng.randrange(4):
                ops.append(f"{view}.copy_({other})")
        self.emit(self.rng.choice(ops))
        self.features.add("inplace_on_conv" if target.from_conv else "inplace")

    def reshape_round_trip(self) -> None:
        """A value taken apart and put back: view, reshape, permute or flatten, maybe with work in between."""
        src = self.pick_map()
        name, mid = self.fresh(), self.fresh("r")
        kind = self.rng.choice([k for k in ("view", "reshape", "permute", "flatten") if
                                (k != "view" or self.uses_view) and self.on(k)] or ["none"])
        if kind == "none":
            return
        self.features.add(kind)
        if kind == "permute":
            self.emit(f"{mid} = {src.name}.permute(0, 2, 3, 1)")
            back = f"{mid}.permute(0, 3, 1, 2)"
            if self.rng.random() < 0.5:
                back += ".contiguous()"
        elif kind == "view":
            self.emit(f"{mid} = {src.name}.view({src.name}.size(0), {src.name}.size(1), -1)")
            back = f"{mid}.view({src.name}.size())"
        elif kind == "reshape":
            self.emit(f"{mid} = {src.name}.reshape([{src.name}.size(0), -1])")
            back = f"{mid}.reshape({src.name}.size())"
        else:
            self.emit(f"{mid} = torch.flatten({src.name}, 1)")
            back = f"{mid}.reshape({src.name}.size())"
        if self.rng.random() < 0.5:
            self.emit(self.rng.choice([f"{mid} = {mid} * 2.0", f"{mid} = torch.tanh({mid})"]))
        self.emit(f"{name} = {back}")
        self.like(src, name)

    def list_ops(self) -> None:
        a = self.pick_map()
        same = [v for v in self.vars if v.kind == "map" and v.spatial == a.spatial]
        items = [a] + self.rng.sample(same, min(len(same), self.rng.randint(1, 2)))
        lst = self.fresh("l")
        self.emit(f"{lst} = [{', '.join(v.name for v in items[:-1])}]")
        self.emit(f"{lst}.append({items[-1].name})")
        if self.rng.random() < 0.4:
            copy = self.fresh("l")
            self.emit(f"{copy} = list({lst})")
            lst = copy
        self.features.add("list")
        writable = [i for i, v in enumerate(items) if not v.from_input]
        if writable and self.on("inplace") and self.rng.random() < 0.5:
            i = self.rng.choice(writable)
            self.emit(f"{lst}[{i}].{self.rng.choice(['mul_(0.5)', 'add_(1.0)', 'relu_()'])}")
            self.features.add("inplace_on_list_element")
        name = self.fresh()
        choice = self.rng.randrange(3)
        if choice == 0:
            self.emit(f"{name} = torch.cat({lst}, 1)")
            self.like(a, name, channels=sum(v.channels for v in items))
        elif choice == 1:
            pick = self.rng.randrange(len(items))
            self.emit(f"{name} = {lst}[{pick}] * 1.0")
            self.like(items[pick], name)
        else:
            self.emit(f"{name} = {a.name} * 0.0")
            self.emit(f"for e in {lst}:")
            self.emit(f"    if e.size(1) == {a.channels}:")
            self.emit(f"        {name} = {name} + e")
            self.features.add("loop")
            self.like(a, name)

    def tuple_ops(self) -> None:
        a = self.pick_map()
        b = self.pick_map()
        tup = self.fresh("p")
        self.emit(f"{tup} = ({a.name}, {b.name})")
        self.features.add("tuple")
        if self.rng.random() < 0.5:
            n1, n2 = self.fresh(), self.fresh()
            self.emit(f"{n1}, {n2} = {tup}")
            self.like(a, n1)
            self.like(b, n2)
            return
        k = self.rng.randrange(2)
        held = (a, b)[k]
        if not held.from_input and self.on("inplace") and self.rng.random() < 0.6:
            self.emit(f"{tup}[{k}].{self.rng.choice(['mul_(2.0)', 'add_(0.5)', 'clamp_(-2.0, 2.0)'])}")
            self.features.add("inplace_on_tuple_element")
        name = self.fresh()
        self.emit(f"{name} = {tup}[{k}]")
        self.like(held, name)

    def fixed(self) -> None:
        """A value that depends only on shapes and constants (the stage folds these), maybe written later."""
        src = self.pick_map()
        name = self.fresh("c")
        form = self.rng.randrange(4)
        if form == 0:
            self.emit(f"{name} = torch.ones({src.name}.size()) * 0.25")
        elif form == 1:
            self.emit(f"{name} = torch.full([{src.name}.size(0), {src.channels}, {src.name}.size(2), "
                      f"{src.name}.size(3)], 0.5)")
        elif form == 2:
            self.emit(f"{name} = torch.arange({src.name}.size(3)).to(torch.float32) * 0.125")
        else:
            self.emit(f"{name} = torch.zeros([{src.name}.size(0), {src.channels}, 1, 1]) + 1.0")
        self.features.add("fixed")
        if form != 2:  # an arange is [W]: it only broadcasts onto maps, so it is no map of its own
            self.like(src, name, spatial=src.spatial if form in (0, 1) else "one", fixed=True)
        if self.on("inplace") and self.rng.random() < 0.5:
            holder = self.rng.randrange(3)
            if holder == 0:
                self.emit(f"{name}.add_(1.0)")
            elif holder == 1:
                lst = self.fresh("l")
                self.emit(f"{lst} = list([{name}])")
                self.emit(f"{lst}[0].mul_(3.0)")
            else:
                tup = self.fresh("p")
                self.emit(f"{tup} = ({name}, {src.name})")
                self.emit(f"{tup}[0].add_(2.0)")
            self.features.add("fixed_written")
        out = self.fresh()
        self.emit(f"{out} = {src.name} + {name}")
        self.like(src, out)

    def random_draw(self) -> None:
        src = self.pick_map()
        name = self.fresh()
        form = self.rng.randrange(6)
        expr = [
            f"{src.name} + 0.1 * torch.randn_like({src.name})",
            f"{src.name} * torch.rand_like({src.name})",
            f"torch.dropout({src.name}, 0.5, True)",
            f"{src.name} * torch.bernoulli(torch.sigmoid({src.name}))",
            f"{src.name} + torch.randn({src.name}.size())",  # sizes only: must not be folded
            f"{src.name} * torch.bernoulli({src.name}, 0.5)",
        ][form]
        self.emit(f"{name} = {expr}")
        self.features.add("random")
        self.like(src, name)

    def attribute_read(self) -> None:
        src = self.pick_map()
        if src.spatial == "one":
            return
        buf = f"scale{len(self.init_lines)}"
        self.init_lines.append(f"self.{buf} = nn.Parameter(torch.rand(1, {src.channels}, 1, 1) + 0.5)")
        name = self.fresh()
        self.emit(f"{name} = {src.name} * self.{buf}")
        self.features.add("attribute_read")
        self.like(src, name)

    def attribute_write(self) -> None:
        # Written, never read into an output: outputs must not depend on how many runs came before.
        if not self.has_counter:
            self.init_lines.append("self.calls = 0")
            self.has_counter = True
        self.emit("self.calls += 1")
        if self.rng.random() < 0.5:
            src = self.pick_map()
            if not self.has_state:
                self.init_lines.append("self.last = torch.zeros(1)")
                self.has_state = True
            self.emit(f"self.last = {src.name}.sum().reshape([1])" if self.on("reshape") else
                      f"self.last = {src.name}.sum() + self.last * 0.0")
        self.features.add("attribute_write")

    def loop(self) -> None:
        a = self.pick_map(writable=True)
        name = self.fresh()
        bound = self.rng.choice(["2", f"{a.name}.size(2) // 4", "3"])
        self.emit(f"{name} = {a.name}")
        self.emit(f"for _ in range({bound}):")
        self.indent += 1
        if self.on("conv") and a.spatial != "one" and self.rng.random() < 0.5:
            m = self.submodule(f"nn.Conv2d({a.channels}, {a.channels}, 3, padding=1)")
            self.emit(f"{name} = {self.activation(f'self.{m}({name})')} * 0.5")
        else:
            self.emit(f"{name} = {name} * 0.5 + {a.name}")
        self.indent -= 1
        self.features.add("loop")
        self.like(a, name)

    def branch(self) -> None:
        a = self.pick_map()
        name = self.fresh()
        cond = self.rng.choice([f"{a.name}.size(2) > 9", "bool(x.sum() > 0.0)", "x.size(0) > 1",
                                "bool(x[0, 0, 0, 0] > 0.0)"])
        self.emit(f"if {cond}:")
        self.indent += 1
        if self.on("conv") and a.spatial != "one" and self.rng.random() < 0.5:
            m = self.submodule(f"nn.Conv2d({a.channels}, {a.channels}, 3, padding=1)")
            self.emit(f"{name} = {self.activation(f'self.{m}({a.name})')}")
        else:
            self.emit(f"{name} = torch.sigmoid({a.name})")
        self.indent -= 1
        self.emit("else:")
        self.indent += 1
        self.emit(f"{name} = {a.name} * 2.0")
        self.indent -= 1
        self.features.add("branch")
        self.like(a, name)

    # -- the whole model

    def statement_kinds(self) -> list[tuple[str, float]]:
        kinds = [("conv", 5.0), ("pair", 2.5), ("linear", 1.0), ("pool", 0.8), ("global_pool", 0.3),
                 ("unary", 1.0), ("binary", 1.2), ("inplace", 2.5), ("reshape_round_trip", 1.2), ("list_ops", 1.0),
                 ("tuple_ops", 0.8), ("fixed", 1.0), ("random_draw", 1.2), ("attribute_read", 0.4),
                 ("attribute_write", 0.3), ("loop", 0.5), ("branch", 0.6)]
        gate = {"reshape_round_trip": "permute", "list_ops": "list", "tuple_ops": "tuple", "random_draw": "random",
                "inplace": "inplace"}
        return [(k, w) for k, w in kinds if self.on(gate.get(k, k))]

    def write(self) -> GeneratedModel:
        kinds = self.statement_kinds()
        # Some models draw no random numbers at all: their every output is compared by value.
        if self.rng.random() < 0.5:
            kinds = [(k, w) for k, w in kinds if k != "random_draw"]
        names = [k for k, _ in kinds]
        weights = [w for _, w in kinds]
        # The stage folds only before a function's first jump: often begin with what it may fold, and what it
        # must not (sizes-only random draws, fixed values written through an alias).
        if self.rng.random() < 0.5:
            prologue = [k for k in ("fixed", "fixed", "random_draw", "tuple_ops", "inplace", "conv") if k in names]
            for _ in range(self.rng.randint(1, 3)):
                getattr(self, self.rng.choice(prologue))()
        for _ in range(self.rng.randint(4, 12)):
            getattr(self, self.rng.choices(names, weights)[0])()
        outputs = self.outputs()
        class_name = f"Differential{self.seed}"
        init = "\n".join(f"        {line}" for line in self.init_lines) or "        pass"
        body = "\n".join(self.lines)
        annotation = ", ".join(["torch.Tensor"] * len(outputs))
        source = (
            f'"""Differential model {self.seed}: tests/differential_models.py --show {self.seed}."""\n'
            "import torch\n"
            "from torch import nn\n"
            "import torch.nn.functional as F\n\n\n"
            f"class {class_name}(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            f"{init}\n\n"
            f"    def forward(self, x: torch.Tensor) -> tuple[{annotation}]:\n"
            f"{body}\n"
            f"        return ({', '.join(outputs)},)\n"
        )
        shapes = self.input_shapes()
        return GeneratedModel(self.seed, class_name, source, shapes, sorted(self.features))

    def outputs(self) -> list[str]:
        candidates = [v for v in self.vars[1:]] or self.vars
        picked = candidates[-1:] + self.rng.sample(candidates[:-1], min(len(candidates) - 1, self.rng.randint(0, 2)))
        fixed = [v for v in self.vars if v.fixed and v not in picked]
        if fixed and self.rng.random() < 0.4:
            picked.append(self.rng.choice(fixed))  # a folded value returned: callers may write to it
        return [v.name for v in picked]

    def input_shapes(self) -> list[tuple[int, ...]]:
        def shape() -> tuple[int, ...]:
            h = self.rng.randint(8, 14)
            w = h if self.rng.random() < 0.6 else self.rng.randint(8, 14)
            return (self.rng.choice([1, 2]), self.channels_in, h, w)

        first = shape()
        second = shape()
        while second == first:
            second = shape()
        return [first] * 3 + [second] * 2 + [first]


def generate(seed: int, ops: frozenset[str]) -> GeneratedModel:
    """The model of `seed`: the same source for the same seed and operator set."""
    return ModelWriter(seed, ops).write()


# --- exporting a generated model


@dataclass(frozen=True)
class Exported:
    """A generated model saved for the lite interpreter: its variants ("frozen", "unfrozen") and input files."""

    directory: Path
    variants: dict[str, Path]
    inputs: list[Path]


class Rejected(Exception):
    """The generator's own rejection of a model it made (not a failure of the stage or of the runtime)."""


class GeneratorFailure(Exception):
    """A generated model that does not script, save or run, or calls an operator the build lacks: a generator bug."""


def load_module_class(source_path: Path, class_name: str) -> type:
    spec = importlib.util.spec_from_file_location(source_path.stem, source_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # TorchScript reads the class's source back from this file
    return getattr(module, class_name)


def make_inputs(model: GeneratedModel) -> list[list[object]]:
    import torch

    generator = torch.Generator().manual_seed(model.seed)
    return [[torch.randn(shape, generator=generator)] for shape in model.input_shapes]


def export(model: GeneratedModel, directory: Path, ops: frozenset[str]) -> Exported:
    """Writes the model's source, scripts it, saves it frozen and unfrozen, and writes its input files."""
    import torch

    from tools.model_ops import ops_of_lite_model_file

    directory.mkdir(parents=True, exist_ok=True)
    source_path = directory / f"differential_{model.seed}.py"
    source_path.write_text(model.source, encoding="utf-8")
    torch.manual_seed(model.seed)  # the submodules' weights
    try:
        module = load_module_class(source_path, model.class_name)().eval()
    except Exception as e:
        raise GeneratorFailure(f"the source does not run: {type(e).__name__}: {e}") from e
    inputs = make_inputs(model)
    with torch.no_grad():
        for i, args in enumerate(inputs):
            try:
                outputs = module(*[a.clone() for a in args])
            except Exception as e:
                raise GeneratorFailure(f"eager run on input {i} failed: {type(e).__name__}: {e}") from e
            if not all(bool(torch.isfinite(t).all()) for t in outputs):
                raise Rejected(f"eager outputs on input {i} are not finite")
    variants: dict[str, Path] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript and the lite interpreter warn they are deprecated
        try:
            scripted = torch.jit.script(module)
        except Exception as e:
            raise GeneratorFailure(f"torch.jit.script failed: {type(e).__name__}: {e}") from e
        try:
            frozen = torch.jit.freeze(scripted)
        except Exception as e:
            raise GeneratorFailure(f"torch.jit.freeze failed: {type(e).__name__}: {e}") from e
        for name, saved in (("frozen", frozen), ("unfrozen", scripted)):
            path = directory / f"differential_{model.seed}.{name}.ptl"
            try:
                saved._save_for_lite_interpreter(str(path))
            except Exception as e:
                raise GeneratorFailure(f"saving the {name} model failed: {type(e).__name__}: {e}") from e
            missing = sorted(ops_of_lite_model_file(path) - ops)
            if missing:
                raise GeneratorFailure(f"the {name} model calls operators the build lacks: {', '.join(missing)}")
            variants[name] = path
    input_paths = []
    for i, args in enumerate(inputs):
        path = directory / f"differential_{model.seed}.inputs{i}.pt"
        torch.save(args, path)
        input_paths.append(path)
    return Exported(directory, variants, input_paths)


# --- running the harness


@dataclass
class HarnessResult:
    variant: str
    inputs: int = 0
    runs: int = 0
    comparisons: int = 0
    disagreements: int = 0
    random: bool = False
    details: list[str] = field(default_factory=list)
    error: str = ""


def run_harness(model_path: Path, inputs: list[Path], variant: str, reference: Path | None = None,
                threads: int = 4, harness: Path = HARNESS) -> HarnessResult:
    command = [str(harness), str(model_path), *map(str, inputs), "--threads", str(threads)]
    if reference is not None:
        command += ["--reference", str(reference)]
    env = dict(os.environ, OMP_NUM_THREADS="1")  # the caller threads are the parallelism under test
    for attempt in range(3):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=HARNESS_TIMEOUT_S, env=env)
            break
        except subprocess.TimeoutExpired:
            return HarnessResult(variant, error=f"differential_check timed out after {HARNESS_TIMEOUT_S:.0f} s")
        except OSError as e:  # the binary being relinked by a build beside us: wait for it
            if attempt == 2:
                return HarnessResult(variant, error=f"cannot run {harness}: {e}")
            time.sleep(10)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return HarnessResult(variant, error=f"differential_check exited {done.returncode} without a report: "
                                            f"{done.stderr.strip()[-400:]}")
    report = json.loads(lines[-1])
    return HarnessResult(variant, report["inputs"], report["runs"], report["comparisons"], report["disagreements"],
                         report["random"], report["details"], report["error"])


@dataclass
class SeedResult:
    seed: int
    status: str  # "ok", "disagreement", "failure", "rejected"
    features: list[str] = field(default_factory=list)
    harness: list[HarnessResult] = field(default_factory=list)
    message: str = ""
    kept: str = ""


def caller_threads(model: GeneratedModel) -> int:
    """4, or 1 for a model that writes its attributes: runs writing one module's attributes at once race on its
    slots and corrupt the heap, with the stage or without it (lite_predictor --parallel 4 --no-specialize too),
    a data race in the model itself that no stage could make agree."""
    return 1 if "attribute_write" in model.features else 4


def check_seed(seed: int, ops: frozenset[str], keep_dir: Path | None) -> SeedResult:
    """Generates, exports and checks one model; its files are kept under `keep_dir` unless it passes."""
    import torch

    torch.set_num_threads(1)
    model = generate(seed, ops)
    directory = Path(tempfile.mkdtemp(prefix=f"differential_{seed}_"))
    result = SeedResult(seed, "ok", model.features)
    try:
        try:
            exported = export(model, directory, ops)
        except Rejected as e:
            result.status, result.message = "rejected", str(e)
            return result
        except GeneratorFailure as e:
            result.status, result.message = "failure", str(e)
            return result
        for variant, path in exported.variants.items():
            outcome = run_harness(path, exported.inputs, variant, threads=caller_threads(model))
            result.harness.append(outcome)
            if outcome.error:
                result.status, result.message = "failure", f"{variant}: {outcome.error}"
            elif outcome.disagreements and result.status == "ok":
                result.status = "disagreement"
                result.message = f"{variant}: " + "; ".join(outcome.details[:2])
        return result
    finally:
        if result.status in ("disagreement", "failure") and keep_dir is not None:
            target = keep_dir / f"seed_{seed}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(directory, target)
            result.kept = str(target)
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class Summary:
    models: int = 0
    rejected: int = 0
    failures: int = 0
    models_disagreeing: int = 0
    inputs: int = 0
    runs: int = 0
    comparisons: int = 0
    disagreements: int = 0
    random_models: int = 0
    seconds: float = 0.0
    failing: list[dict] = field(default_factory=list)

    def add(self, r: SeedResult) -> None:
        self.models += 1
        self.rejected += r.status == "rejected"
        self.failures += r.status == "failure"
        self.models_disagreeing += r.status == "disagreement"
        self.random_models += any(h.random for h in r.harness)
        for h in r.harness:
            self.inputs += h.inputs
            self.runs += h.runs
            self.comparisons += h.comparisons
            self.disagreements += h.disagreements
        if r.status in ("disagreement", "failure"):
            self.failing.append({"seed": r.seed, "status": r.status, "message": r.message, "kept": r.kept,
                                 "features": r.features})


def run_many(seeds: list[int], jobs: int, keep_dir: Path | None, progress: bool = False) -> Summary:
    ops = available_ops()
    summary = Summary()
    start = time.monotonic()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for r in pool.map(check_seed, seeds, [ops] * len(seeds), [keep_dir] * len(seeds)):
            summary.add(r)
            if progress and r.status in ("disagreement", "failure"):
                print(f"seed {r.seed}: {r.status}: {r.message} ({r.kept})", file=sys.stderr, flush=True)
    summary.seconds = time.monotonic() - start
    return summary


# --- reducing a disagreement


def disagreement_kind(detail: str) -> str:
    """What a disagreement is, whatever the input and output it was seen on."""
    for kind in ("strides", "raised", "failed to load", "gave the same values", "runs on the same input differ",
                 "outputs, the reference's", "differs"):
        if kind in detail:
            return kind
    return "other"


def disagrees(model: GeneratedModel, directory: Path, ops: frozenset[str], variant: str, kind: str) -> bool:
    """Whether `model` still shows a disagreement of `kind` in `variant` (False if it no longer scripts or runs)."""
    shutil.rmtree(directory, ignore_errors=True)
    try:
        exported = export(model, directory, ops)
    except (Rejected, GeneratorFailure):
        return False
    result = run_harness(exported.variants[variant], exported.inputs, variant, threads=caller_threads(model))
    return not result.error and any(disagreement_kind(d) == kind for d in result.details)


def reduce_model(model: GeneratedModel, ops: frozenset[str], variant: str, kind: str) -> GeneratedModel:
    """The model with every line of its source deleted, one at a time, that the disagreement survives without,
    and every output it survives without (a model that no longer scripts or runs does not count)."""
    directory = Path(tempfile.mkdtemp(prefix="differential_reduce_"))
    try:
        lines = model.source.splitlines()
        changed = True
        while changed:
            changed = False
            for i in reversed(range(len(lines))):
                line = lines[i].strip()
                if line.startswith("return ("):
                    names = [n.strip() for n in line[len("return ("):-len(",)")].split(",")]
                    for name in list(names):
                        if len(names) == 1:
                            break
                        kept = [n for n in names if n != name]
                        trial = lines[:i] + [lines[i].replace(line, f"return ({', '.join(kept)},)")] + lines[i + 1:]
                        candidate = with_source(model, trial, len(kept))
                        if disagrees(candidate, directory, ops, variant, kind):
                            lines, names, changed = candidate.source.splitlines(), kept, True
                    continue
                if not line.startswith("self.") and "=" not in line and not line.endswith(")"):
                    continue  # class and def lines, imports
                trial = lines[:i] + lines[i + 1:]
                if disagrees(with_source(model, trial), directory, ops, variant, kind):
                    lines, changed = trial, True
        return with_source(model, lines)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def with_source(model: GeneratedModel, lines: list[str], outputs: int | None = None) -> GeneratedModel:
    source = "\n".join(lines) + "\n"
    if outputs is not None:  # forward's return annotation follows the outputs
        import re

        source = re.sub(r"-> tuple\[[^\]]*\]:", f"-> tuple[{', '.join(['torch.Tensor'] * outputs)}]:", source)
    return GeneratedModel(model.seed, model.class_name, source, model.input_shapes, model.features)


def reduce_seed(seed: int, ops: frozenset[str]) -> str:
    """The smallest model of `seed`'s that still disagrees as `seed`'s does, as source; "" if it agrees."""
    model = generate(seed, ops)
    directory = Path(tempfile.mkdtemp(prefix=f"differential_{seed}_"))
    try:
        exported = export(model, directory, ops)
        for variant, path in exported.variants.items():
            result = run_harness(path, exported.inputs, variant, threads=caller_threads(model))
            if result.disagreements:
                kind = disagreement_kind(result.details[0])
                reduced = reduce_model(model, ops, variant, kind)
                return f"# {variant}: {kind}: {result.details[0]}\n{reduced.source}"
        return ""
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python tests/differential_models.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100, help="how many models (default 100)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first model's seed (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="models checked at once (default 2)")
    parser.add_argument("--keep-dir", type=Path, default=BUILD_DIR / "differential_failures",
                        help="where failing models are kept with their source and inputs "
                             "(default build/differential_failures)")
    parser.add_argument("--show", type=int, metavar="SEED", help="print the source of SEED's model and exit")
    parser.add_argument("--reduce", type=int, metavar="SEED",
                        help="reduce SEED's disagreeing model line by line to the smallest that disagrees alike, "
                             "print its source and exit")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not HARNESS.is_file():
        print(f"{HARNESS} is missing: cmake --build {BUILD_DIR} --target differential_check", file=sys.stderr)
        return 2
    if args.show is not None:
        print(generate(args.show, available_ops()).source, end="")
        return 0
    if args.reduce is not None:
        reduced = reduce_seed(args.reduce, available_ops())
        print(reduced or f"model {args.reduce} agrees: nothing to reduce", end="")
        return 0 if reduced else 1
    seeds = list(range(args.first_seed, args.first_seed + args.count))
    summary = run_many(seeds, args.jobs, args.keep_dir, progress=not args.json)
    if args.json:
        print(json.dumps(summary.__dict__))
    else:
        print(f"models {summary.models} (rejected by the generator {summary.rejected}, drawing random numbers "
              f"{summary.random_models}), inputs {summary.inputs}, runs {summary.runs}, comparisons "
              f"{summary.comparisons}, disagreements {summary.disagreements} in {summary.models_disagreeing} "
              f"model(s), failures {summary.failures}, {summary.seconds:.0f} s")
        for f in summary.failing:
            print(f"  seed {f['seed']}: {f['status']}: {f['message']}")
    return 0 if summary.failures == 0 and summary.disagreements == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
