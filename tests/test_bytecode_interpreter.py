"""lite_predictor's own bytecode loop (--interpreter lightweight) against LibTorch's stock one: the same
outputs bit for bit and the same errors, on models written to reach every kind of instruction it runs
itself or hands to the stock interpreter; and bytecode that would make an unchecked loop misbehave is
refused at load, naming the function and the instruction."""
# No `from __future__ import annotations`: TorchScript must see the interface class, not its name.
import io
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Set, Tuple

import pytest
import torch
from torch import Tensor

from predictor_runner import run_predictor, save_lite_model
from scripts.dump_ops import flatten_outputs

CANNOT_LOAD, RUN_FAILED = 3, 6


@torch.jit.interface
class Scaler(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        pass


class Doubler(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * 2.0


class Stats(NamedTuple):
    low: Tensor
    high: Tensor


class Instructions(torch.nn.Module):
    """Attributes, an interface call, dicts, tuples, lists, a loop, branches, f-strings and warnings."""

    scaler: Scaler

    def __init__(self) -> None:
        super().__init__()
        self.scaler = Doubler()  # INTERFACE_CALL
        self.offset = torch.tensor([0.5, -0.25, 1.0])
        self.scratch = torch.zeros(3)

    def forward(self, x: Tensor, y: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        scaled = self.scaler.forward(x) + self.offset  # GET_ATTR
        self.scratch = scaled - y  # SET_ATTR
        table = {"x": x, "y": y, "scaled": scaled}  # DICT_CONSTRUCT
        total = table["x"] + table["scaled"]  # DICT_INDEX
        parts = (x, y, total, scaled) if bool(x.sum() > 0) else (y, x, scaled, total)
        middle = parts[1:3]  # folded by TorchScript into tuple (un)packing
        stats = Stats(total.min(), total.max())  # folded likewise
        pieces = [x, y]  # LIST_CONSTRUCT
        first, second = pieces  # LIST_UNPACK
        accumulated = torch.zeros_like(x)
        for i in range(4):  # LOOP
            if i % 2 == 0:  # JF, JMP
                accumulated = accumulated + first * float(i)
            else:
                accumulated = accumulated - second
        label = f"rank {x.dim()} on {x.device} as {x.dtype}"  # FORMAT, DIM, DEVICE, DTYPE
        if len(label) == 0:
            warnings.warn("an empty label")  # WARN (never reached)
        maybe: Optional[List[int]] = None if x.dim() > 5 else [1]
        if maybe is not None:  # __ISNOT__
            accumulated = accumulated + float(len(maybe))
        if not bool(x.is_cuda):  # IS_CUDA, __NOT__
            accumulated = accumulated * 1.5
        return middle[0] + middle[1], stats.low + stats.high, accumulated, self.scratch, torch.tensor(len(label))


class Raises(torch.nn.Module):
    """RAISE_EXCEPTION with a formatted message when the input is out of range."""

    def forward(self, x: Tensor) -> Tensor:
        if bool(x.max() > 10.0):
            raise ValueError(f"input too large: {x.max().item()}")
        return x + 1.0


def inputs_file(tmp_path: Path, *tensors: Tensor) -> Path:
    path = tmp_path / "inputs.pt"
    torch.save(list(tensors), path)
    return path


def run_both(predictor: Path, model: Path, inputs: Path, tmp_path: Path) -> Dict[str, tuple]:
    """Run `model` (dynamic dispatch: any op) under both loops; returns each run and its saved outputs."""
    results: Dict[str, tuple] = {}
    for interpreter in ("lightweight", "stock"):
        out = tmp_path / f"{interpreter}.pt"
        run = run_predictor(predictor, model, "--dispatch", "dynamic", "--interpreter", interpreter, "--input", inputs,
                            "--iters", "2", "--warmup", "1", "--json", "--save-outputs", out)
        results[interpreter] = (run, torch.load(out) if run.returncode == 0 else None)
    return results


def assert_bitwise_equal(a: tuple[Tensor, ...], b: tuple[Tensor, ...]) -> None:
    assert len(a) == len(b) > 0
    for left, right in zip(a, b):
        assert left.dtype == right.dtype and left.shape == right.shape
        assert left.contiguous().reshape(-1).view(torch.uint8).equal(right.contiguous().reshape(-1).view(torch.uint8))


def test_every_instruction_kind_matches_the_stock_interpreter(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(Instructions(), tmp_path / "instructions.ptl")
    x, y = torch.tensor([1.0, -2.0, 3.5]), torch.tensor([0.25, 4.0, -1.0])
    results = run_both(predictor, model, inputs_file(tmp_path, x, y), tmp_path)
    (light_run, light_out), (stock_run, stock_out) = results["lightweight"], results["stock"]
    assert light_run.returncode == 0, light_run.stderr
    assert stock_run.returncode == 0, stock_run.stderr
    assert light_run.json()["interpreter"] == "lightweight" and stock_run.json()["interpreter"] == "stock"
    assert_bitwise_equal(light_out, stock_out)
    with torch.no_grad():
        eager = Instructions()(x, y)
    # The label's length is left out: TorchScript formats a dtype as its number, Python as its name.
    for got, want in zip(light_out[:4], eager[:4]):
        torch.testing.assert_close(got, want)


def test_the_bytecode_reaches_the_instructions_the_test_means_to_cover(tmp_path: Path) -> None:
    """If TorchScript stops emitting one of these, the comparison above no longer covers it: say so."""
    model = save_lite_model(Instructions(), tmp_path / "instructions.ptl")
    opcodes = bytecode_opcodes(model.read_bytes())
    wanted = {"INTERFACE_CALL", "GET_ATTR", "SET_ATTR", "DICT_CONSTRUCT",
              "LIST_CONSTRUCT", "LIST_UNPACK", "LOOP", "JF", "JMP", "FORMAT", "DIM", "DEVICE", "DTYPE", "__ISNOT__",
              "IS_CUDA", "__NOT__", "TUPLE_CONSTRUCT", "OP", "LOADC", "MOVE", "STORE", "RET"}
    assert wanted <= opcodes, sorted(wanted - opcodes)


def test_a_model_raising_fails_with_the_stock_message(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(Raises(), tmp_path / "raises.ptl")
    results = run_both(predictor, model, inputs_file(tmp_path, torch.tensor([1.0, 20.0])), tmp_path)
    (light_run, _), (stock_run, _) = results["lightweight"], results["stock"]
    assert light_run.returncode == stock_run.returncode == RUN_FAILED
    assert "input too large: 20" in light_run.stderr
    assert light_run.stderr.splitlines()[0] == stock_run.stderr.splitlines()[0]


def test_a_model_that_does_not_raise_runs_under_both(predictor: Path, tmp_path: Path) -> None:
    model = save_lite_model(Raises(), tmp_path / "raises.ptl")
    results = run_both(predictor, model, inputs_file(tmp_path, torch.tensor([1.0, 2.0])), tmp_path)
    (light_run, light_out), (stock_run, stock_out) = results["lightweight"], results["stock"]
    assert light_run.returncode == stock_run.returncode == 0, light_run.stderr
    assert_bitwise_equal(light_out, stock_out)


@pytest.mark.parametrize("model", ["micro_add_loop", "list_ops", "transformer"])
def test_static_dispatch_in_either_loop_gives_the_same_bits(
    model: str, predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    outputs = {}
    for interpreter in ("lightweight", "stock"):
        out = tmp_path / f"{interpreter}.pt"
        run = run_predictor(predictor, models_dir / f"{model}.ptl", "--interpreter", interpreter, "--iters", "1",
                            "--warmup", "0", "--json", "--save-outputs", out)
        assert run.returncode == 0, run.stderr
        assert run.json()["dispatch"] == "static" and run.json()["interpreter"] == interpreter
        outputs[interpreter] = flatten_outputs(torch.load(out))  # saved with the outputs' structure
    assert_bitwise_equal(outputs["lightweight"], outputs["stock"])


def test_default_loops_follow_the_dispatch_mode(predictor: Path, models_dir: Path) -> None:
    for dispatch, interpreter in (("static", "lightweight"), ("dynamic", "stock")):
        run = run_predictor(predictor, models_dir / "micro_add_loop.ptl", "--dispatch", dispatch, "--iters", "1", "--json")
        assert run.returncode == 0, run.stderr
        assert run.json()["interpreter"] == interpreter


def test_bad_interpreter_value_is_a_usage_error(predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, models_dir / "micro_add_loop.ptl", "--interpreter", "fast")
    assert run.returncode == 2
    assert "--interpreter expects 'lightweight' or 'stock', got 'fast'" in run.stderr


# --- bytecode an unchecked loop must not run
class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # bytecode.pkl holds plain tuples; anything else is a surprise
        raise AssertionError(f"unexpected global {module}.{name} in bytecode.pkl")


def _bytecode_record(archive: zipfile.ZipFile) -> str:
    return next(name for name in archive.namelist() if name.endswith("/bytecode.pkl"))


def _instructions_of(function: tuple) -> list:
    # (name, (("instructions", (...)), ("operators", ...), ...), schema)
    return dict(function[1])["instructions"]


def bytecode_opcodes(data: bytes) -> set[str]:
    archive = zipfile.ZipFile(io.BytesIO(data))
    bytecode = _Unpickler(io.BytesIO(archive.read(_bytecode_record(archive)))).load()
    return {instruction[0] for function in bytecode[1:] for instruction in _instructions_of(function)}


def with_patched_instruction(data: bytes, opcode: str, replace: Callable[[tuple], tuple]) -> bytes:
    """The archive with the first `opcode` instruction of the first function rewritten by `replace`."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    record = _bytecode_record(archive)
    bytecode = list(_Unpickler(io.BytesIO(archive.read(record))).load())
    function = bytecode[1]
    code = [list(entry) for entry in function[1]]
    for entry in code:
        if entry[0] == "instructions":
            instructions = list(entry[1])
            index = next(i for i, inst in enumerate(instructions) if inst[0] == opcode)
            instructions[index] = replace(instructions[index])
            entry[1] = tuple(instructions)
    bytecode[1] = (function[0], tuple(tuple(entry) for entry in code), *function[2:])
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in archive.infolist():
            payload = pickle.dumps(tuple(bytecode), protocol=2) if info.filename == record else archive.read(info)
            target.writestr(info.filename, payload)
    return out.getvalue()


@pytest.mark.parametrize(
    ("opcode", "replace", "complaint"),
    [
        ("LOAD", lambda inst: (inst[0], 999, inst[2]), "register 999 is outside the function's"),
        ("JMP", lambda inst: (inst[0], 5000, inst[2]), "jump target"),
        ("LOADC", lambda inst: (inst[0], 77, inst[2]), "constant index 77 is out of range"),
    ],
)
def test_malformed_bytecode_is_refused_at_load(
    opcode: str, replace, complaint: str, predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    model = tmp_path / "micro_add_loop.ptl"
    model.write_bytes(with_patched_instruction((models_dir / "micro_add_loop.ptl").read_bytes(), opcode, replace))
    run = run_predictor(predictor, model, "--input", models_dir / "micro_add_loop.inputs.pt")
    assert run.returncode == CANNOT_LOAD, run.stderr
    assert "forward, instruction" in run.stderr and f"({opcode})" in run.stderr
    assert complaint in run.stderr
