"""Bad inputs, damaged models and concurrent runs: a message and a documented exit code, never a crash;
the build tools never leave a half-written file."""
from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path
from typing import Callable

import pytest
import torch

from fuzz_models import fuzz, summarize
from predictor_runner import run_predictor
from tools import gen_unboxing
from tools import emit_unboxing

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL = "out_variants"  # small, with two inputs and three outputs

USAGE, CANNOT_LOAD, NOT_IN_BUILD, BAD_INPUTS, RUN_FAILED, DIFFER = 2, 3, 4, 5, 6, 1


@pytest.fixture()
def model_copy(models_dir: Path, tmp_path: Path) -> Path:
    """The model and its inputs/expected files, copied so tests can damage them."""
    for suffix in (".ptl", ".inputs.pt", ".expected.pt"):
        shutil.copy(models_dir / f"{MODEL}{suffix}", tmp_path / f"{MODEL}{suffix}")
    return tmp_path / f"{MODEL}.ptl"


def rewrite_archive(path: Path, drop: str | None = None, corrupt: str | None = None) -> None:
    source = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            data = source.read(info)
            if drop and info.filename.endswith(drop):
                continue
            if corrupt and info.filename.endswith(corrupt):
                data = b"\x80\x02garbage" + data[len(data) // 2:]
            target.writestr(info.filename, data)
    path.write_bytes(out.getvalue())


def expect(run_args: tuple[object, ...], predictor: Path, code: int, *fragments: str) -> str:
    run = run_predictor(predictor, *run_args)
    assert run.returncode == code, (run.returncode, run.stderr)
    for fragment in fragments:
        assert fragment in run.stderr, run.stderr
    return run.stderr


# --- the model file
def test_missing_model(predictor: Path, tmp_path: Path) -> None:
    expect((tmp_path / "absent.ptl",), predictor, CANNOT_LOAD, "absent.ptl: no such model file")


def test_directory_instead_of_model(predictor: Path, tmp_path: Path) -> None:
    expect((tmp_path,), predictor, CANNOT_LOAD, "not a regular file")


def test_empty_model(predictor: Path, model_copy: Path) -> None:
    model_copy.write_bytes(b"")
    expect((model_copy,), predictor, CANNOT_LOAD, "the file is empty")


def test_not_a_zip(predictor: Path, model_copy: Path) -> None:
    model_copy.write_text("def forward(self, x): return x\n")
    expect((model_copy,), predictor, CANNOT_LOAD, "not a lite-interpreter model (not a zip archive)")


def test_truncated_model(predictor: Path, model_copy: Path) -> None:
    data = model_copy.read_bytes()
    model_copy.write_bytes(data[: len(data) * 2 // 3])
    expect((model_copy,), predictor, CANNOT_LOAD, "damaged archive (truncated or corrupted)")


def test_bit_flipped_model(predictor: Path, model_copy: Path) -> None:
    data = bytearray(model_copy.read_bytes())
    with zipfile.ZipFile(model_copy) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("bytecode.pkl"))
    name_length = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little")
    extra_length = int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    data[info.header_offset + 30 + name_length + extra_length + 5] ^= 0x10
    model_copy.write_bytes(bytes(data))
    expect((model_copy,), predictor, CANNOT_LOAD, "damaged archive", "CRC")


def _deflated_record(path: Path) -> zipfile.ZipInfo:
    with zipfile.ZipFile(path) as archive:
        return next(i for i in archive.infolist()
                    if i.compress_type == zipfile.ZIP_DEFLATED and i.filename.endswith(".debug_pkl"))


def _deflate_stream_offset(data: bytes, info: zipfile.ZipInfo) -> int:
    name_length = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little")
    extra_length = int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    return info.header_offset + 30 + name_length + extra_length


def _inflate(stream: bytes) -> bytes | None:
    """The record's bytes as any conforming inflater sees them, or None where the stream is invalid."""
    try:
        return zlib.decompress(stream, wbits=-15)
    except zlib.error:
        return None


def _stream_of(path: Path, info: zipfile.ZipInfo) -> bytes:
    data = path.read_bytes()
    start = _deflate_stream_offset(data, info)
    return data[start:start + info.compress_size]


def _first_bit_flip(data: bytes, info: zipfile.ZipInfo, wanted: Callable[[bytes | None], bool]) -> int:
    """The bit offset in `data` of the first single-bit flip, from the middle of the record's deflate
    stream on, whose inflated result satisfies `wanted`: searched for, so the test does not depend on
    which bytes this torch version happened to compress."""
    start = _deflate_stream_offset(data, info)
    stream = bytearray(data[start:start + info.compress_size])
    for position in range(len(stream) // 2, len(stream)):
        for bit in range(8):
            stream[position] ^= 1 << bit
            if wanted(_inflate(bytes(stream))):
                return (start + position) * 8 + bit
            stream[position] ^= 1 << bit
    raise AssertionError(f"no single-bit flip of {info.filename} has the wanted effect")


def _flip_bit(path: Path, bit_offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[bit_offset // 8] ^= 1 << (bit_offset % 8)
    path.write_bytes(bytes(data))


def test_archive_checksum_fast_path_agrees_with_the_tables() -> None:
    """The CRC-32 every record is checked with: the carry-less-multiply path (this CPU has it) against
    the table-driven one on every length to 1100 bytes at 16 alignments, and the standard check value."""
    program = REPO_ROOT / "build" / "crc32_check"
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=120, check=False)
    assert (result.returncode, result.stdout.strip()) == (0, "crc32_check: OK"), result.stdout + result.stderr


# The stock interpreter reads the debug records (its errors quote the model's source from them); the lightweight
# one, the default, does not, and the load hides them from LibTorch's loader.
STOCK_INTERPRETER = ("--interpreter", "stock")


def _flip_a_debug_record_that_still_inflates(model: Path) -> zipfile.ZipInfo:
    info = _deflated_record(model)
    original = _inflate(_stream_of(model, info))
    flip = _first_bit_flip(model.read_bytes(), info,
                           lambda inflated: inflated is not None and len(inflated) == info.file_size
                           and inflated != original)
    _flip_bit(model, flip)
    return info


def test_bit_flip_in_a_compressed_record_that_still_inflates(predictor: Path, model_copy: Path) -> None:
    """torch deflates its debug records, and LibTorch inflates them without a CRC check: one flipped byte
    once had the debug-table unpickler allocate 20 GB (a 48 s stall found by the fuzzer)."""
    info = _flip_a_debug_record_that_still_inflates(model_copy)
    expect((model_copy, *STOCK_INTERPRETER), predictor, CANNOT_LOAD, f"record {info.filename} fails its CRC-32 check")


def test_the_lightweight_interpreter_never_reads_the_debug_records(predictor: Path, model_copy: Path) -> None:
    """The same damaged debug record: the default run loads without it (LibTorch's loader is handed the archive
    without the records under code/) and computes the reference outputs; only the stock interpreter refuses."""
    info = _flip_a_debug_record_that_still_inflates(model_copy)
    run = run_predictor(predictor, model_copy)
    assert run.returncode == 0, run.stderr
    assert "MATCH" in run.stdout and "fails its CRC-32 check" not in run.stderr, run.stdout + run.stderr
    expect((model_copy, *STOCK_INTERPRETER), predictor, CANNOT_LOAD, f"record {info.filename} fails its CRC-32 check")


def test_bit_flip_in_a_compressed_record_that_no_longer_inflates(predictor: Path, model_copy: Path) -> None:
    info = _deflated_record(model_copy)
    # A valid stream that ends short of the size the archive records. (Streams zlib rejects, or that run
    # long, miniz may still inflate up to the recorded size: those reach the CRC-32 check instead.)
    flip = _first_bit_flip(model_copy.read_bytes(), info,
                           lambda inflated: inflated is not None and len(inflated) < info.file_size)
    _flip_bit(model_copy, flip)
    expect((model_copy, *STOCK_INTERPRETER), predictor, CANNOT_LOAD, f"record {info.filename} cannot be inflated")


def test_compressed_record_claiming_an_impossible_size(predictor: Path, model_copy: Path) -> None:
    data = bytearray(model_copy.read_bytes())
    info = _deflated_record(model_copy)
    directory_entry = data.index(b"PK\x01\x02")
    # Find this record's central-directory entry by its local-header offset, then claim 2 GB inflated.
    while int.from_bytes(data[directory_entry + 42:directory_entry + 46], "little") != info.header_offset:
        directory_entry = data.index(b"PK\x01\x02", directory_entry + 4)
    data[directory_entry + 24:directory_entry + 28] = (0x7FFFFFFF).to_bytes(4, "little")
    model_copy.write_bytes(bytes(data))
    expect((model_copy, *STOCK_INTERPRETER), predictor, CANNOT_LOAD, f"record {info.filename} claims an impossible size")


def test_archive_without_bytecode_record(predictor: Path, model_copy: Path) -> None:
    rewrite_archive(model_copy, drop="bytecode.pkl")
    expect((model_copy,), predictor, CANNOT_LOAD, "no lite-interpreter bytecode in the archive")


def test_archive_with_a_record_missing(predictor: Path, model_copy: Path) -> None:
    rewrite_archive(model_copy, drop="data.pkl")
    expect((model_copy,), predictor, CANNOT_LOAD, "cannot load as a lite-interpreter model")


def test_archive_with_a_corrupted_pickle(predictor: Path, model_copy: Path) -> None:
    rewrite_archive(model_copy, corrupt="bytecode.pkl")
    expect((model_copy,), predictor, CANNOT_LOAD, "cannot load as a lite-interpreter model")


# --- inputs and references
def test_missing_input_file(predictor: Path, model_copy: Path, tmp_path: Path) -> None:
    expect((model_copy, "--input", tmp_path / "none.pt"), predictor, BAD_INPUTS, "none.pt: cannot open the file")


def test_input_file_that_is_not_a_tensor_list(predictor: Path, model_copy: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    torch.save({"x": 1}, bad)
    expect((model_copy, "--input", bad), predictor, BAD_INPUTS,
           "bad.pt: expected a list or tuple of forward's arguments, found a dict")
    bad.write_text("not a pickle")
    expect((model_copy, "--input", bad), predictor, BAD_INPUTS, "bad.pt: not a torch.save file of forward's arguments")


def test_list_with_a_non_tensor(predictor: Path, model_copy: Path, tmp_path: Path) -> None:
    bad = tmp_path / "mixed.pt"
    torch.save([torch.ones(3, 4), 7], bad)
    expect((model_copy, "--input", bad), predictor, BAD_INPUTS,
           "argument 'b' (input 1) is an int, but the model's forward declares b: Tensor")


def test_wrong_input_count(predictor: Path, model_copy: Path, tmp_path: Path) -> None:
    one = tmp_path / "one.pt"
    torch.save([torch.ones(3, 4)], one)
    expect((model_copy, "--input", one), predictor, BAD_INPUTS,
           "forward needs argument 'b' (Tensor), which the inputs file does not give and which has no default")


def test_wrong_input_dtype(predictor: Path, model_copy: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_dtype.pt"
    torch.save([torch.ones(3, 4, dtype=torch.float64), torch.ones(3, 4, dtype=torch.float64)], wrong)
    expect((model_copy, "--input", wrong), predictor, BAD_INPUTS,
           "input 0 is Double[3, 4], but the model was exported with Float[3, 4]")


def test_wrong_input_rank(predictor: Path, model_copy: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_rank.pt"
    torch.save([torch.ones(12), torch.ones(12)], wrong)
    expect((model_copy, "--input", wrong), predictor, BAD_INPUTS, "input 0 is Float[12], but the model was exported")


def test_reference_that_does_not_fit(predictor: Path, model_copy: Path, tmp_path: Path) -> None:
    short = tmp_path / "short.pt"
    torch.save([torch.zeros(3, 4)], short)
    expect((model_copy, "--expected", short), predictor, BAD_INPUTS,
           "the reference does not fit the model's outputs: the model returned 3 tensor(s), the reference has 1")
    shaped = tmp_path / "shaped.pt"
    torch.save([torch.zeros(3, 4), torch.zeros(5), torch.zeros(3)], shaped)
    expect((model_copy, "--expected", shaped), predictor, BAD_INPUTS, "output 1 is Float[4], the reference is Float[5]")


@pytest.mark.parametrize(("flags", "message"), [
    (("--iters", "0"), "--iters expects an integer >= 1, got '0'"),
    (("--iters", "ten"), "--iters expects an integer >= 1, got 'ten'"),
    (("--warmup", "-1"), "--warmup expects an integer >= 0"),
    (("--threads", "0"), "--threads expects an integer >= 1"),
    (("--parallel", "x"), "--parallel expects an integer >= 1"),
    (("--atol", "-1"), "--atol expects a non-negative number, got '-1'"),
    (("--rtol", "nan"), "--rtol expects a non-negative number, got 'nan'"),
    (("--input",), "--input expects a value"),
    (("--dispatch", "fast"), "--dispatch expects 'static' or 'dynamic', got 'fast'"),
    (("--bogus",), "unknown option '--bogus'"),
])
def test_bad_flag_values(predictor: Path, model_copy: Path, flags: tuple[str, ...], message: str) -> None:
    expect((model_copy, *flags), predictor, USAGE, message)


def test_two_model_files_is_a_usage_error(predictor: Path, model_copy: Path) -> None:
    expect((model_copy, model_copy), predictor, USAGE, "expected one model file, got 2")


def test_unwritable_save_outputs_path(predictor: Path, model_copy: Path, tmp_path: Path) -> None:
    expect((model_copy, "--save-outputs", tmp_path / "no_dir" / "out.pt"), predictor, USAGE, "cannot write the file")


# --- crashes inside LibTorch become messages
def _emptied_storage_model(models_dir: Path, tmp_path: Path) -> Path:
    """indexing.ptl with its first constant's storage record emptied and a valid checksum. The load checks pass it:
    the tensor's storage size comes from the pickle, not from the record's length, so it fits its "data". A
    kernel then reads past the empty buffer and LibTorch dies by SIGSEGV while running."""
    model = tmp_path / "indexing.ptl"
    source = zipfile.ZipFile(io.BytesIO((models_dir / "indexing.ptl").read_bytes()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            target.writestr(info.filename, b"" if info.filename.endswith("constants/0.storage") else source.read(info))
    model.write_bytes(out.getvalue())
    return model


def _guard_message(model: Path) -> str:
    return (f"lite_predictor: error: {model}: LibTorch crashed (signal 11, Segmentation fault) while running this "
            "model; the file is probably damaged or was not made by a compatible exporter")


def test_a_crash_inside_libtorch_is_reported_not_suffered(predictor: Path, models_dir: Path, tmp_path: Path) -> None:
    model = _emptied_storage_model(models_dir, tmp_path)
    run = run_predictor(predictor, model, "--input", models_dir / "indexing.inputs.pt")
    assert run.returncode == RUN_FAILED, (run.returncode, run.stderr)  # an exit code, not death by the signal
    assert _guard_message(model) in run.stderr, run.stderr
    assert run.stdout == ""  # the crash ended the run before it could report


def test_without_the_crash_guard_that_crash_kills_the_predictor(
    predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    # --in-process runs the work without the guard: what the test above sees is the guard's doing.
    model = _emptied_storage_model(models_dir, tmp_path)
    run = run_predictor(predictor, model, "--input", models_dir / "indexing.inputs.pt", "--in-process")
    assert run.returncode == -signal.SIGSEGV, (run.returncode, run.stderr)
    assert "LibTorch crashed" not in run.stderr


def _run_with_test_only_crash(predictor: Path, models_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """lite_predictor with its test-only crash (main.cpp: LIGHTWEIGHT_DISPATCH_TEST_ONLY_CRASH=segv): it raises
    SIGSEGV just before it runs the (undamaged) model. It keeps the guard tested end to end should the
    load checks come to refuse the damaged file above."""
    env = {**os.environ, "LIGHTWEIGHT_DISPATCH_TEST_ONLY_CRASH": "segv"}
    return subprocess.run(
        [str(predictor), str(models_dir / "indexing.ptl"), "--input", str(models_dir / "indexing.inputs.pt"), *flags],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )


def test_a_worker_killed_by_a_signal_while_running_is_reported(predictor: Path, models_dir: Path) -> None:
    run = _run_with_test_only_crash(predictor, models_dir)
    assert run.returncode == RUN_FAILED, (run.returncode, run.stderr)
    assert _guard_message(models_dir / "indexing.ptl") in run.stderr, run.stderr
    assert run.stdout == ""


def test_the_test_only_crash_kills_the_predictor_without_the_guard(predictor: Path, models_dir: Path) -> None:
    run = _run_with_test_only_crash(predictor, models_dir, "--no-crash-guard")
    assert run.returncode == -signal.SIGSEGV, (run.returncode, run.stderr)


# --- fuzzing: no death by signal, no hang
def test_fuzzed_models_never_kill_the_predictor(predictor: Path, models_dir: Path) -> None:
    outcomes = fuzz(predictor, models_dir, count=int(os.environ.get("LD_FUZZ_COUNT", "240")), jobs=2)
    report = summarize(outcomes)
    print(report)
    assert all(o.returncode is not None for o in outcomes), report  # no hangs
    assert all(o.returncode >= 0 for o in outcomes), report  # no signals
    assert {o.returncode for o in outcomes} <= {0, 1, 3, 4, 5, 6}, report
    assert sum(o.returncode == CANNOT_LOAD for o in outcomes) > len(outcomes) // 4  # the damage was noticed


# --- concurrency
def test_parallel_runs_share_one_module_and_agree(predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, models_dir / "list_ops.ptl", "--parallel", "4", "--iters", "25", "--json")
    assert run.returncode == 0, run.stderr
    parallel = run.json()["parallel"]
    assert parallel["threads"] == 4 and parallel["runs"] == 100
    assert parallel["outputs_identical"] is True
    assert parallel["runs_per_s"] > 0


def test_parallel_mobilenet_outputs_equal_the_single_threaded_run(predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--parallel", "4", "--iters", "2", "--json")
    assert run.returncode == 0, run.stderr
    assert run.json()["parallel"]["outputs_identical"] is True and run.json()["outputs_match"] is True


# --- atomic writes in the build tools
def test_generator_failing_half_way_leaves_previous_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    selection = tmp_path / "ops.yaml"
    selection.write_text("- aten::add.Tensor\n- aten::relu\n- aten::sigmoid\n")
    out = tmp_path / "gen"
    assert gen_unboxing.main(["--op-selection-yaml-path", str(selection), "--install-dir", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    selection.write_text("- aten::add.Tensor\n- aten::relu\n- aten::sigmoid\n- aten::tanh\n- aten::exp\n")
    calls = {"n": 0}
    real_emit_shard = emit_unboxing.emit_shard

    def failing_emit_shard(*args: object, **kwargs: object) -> str:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("disk on fire half way")
        return real_emit_shard(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gen_unboxing, "emit_shard", failing_emit_shard)
    with pytest.raises(RuntimeError, match="half way"):
        gen_unboxing.main(["--op-selection-yaml-path", str(selection), "--install-dir", str(out)])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_killed_generator_leaves_only_whole_files(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    small = tmp_path / "small.yaml"
    small.write_text("- aten::add.Tensor\n")
    cmd = [sys.executable, "-m", "tools.gen_unboxing", "--install-dir", str(out), "--num-shards", "16"]
    subprocess.run([*cmd, "--op-selection-yaml-path", str(small)], cwd=REPO_ROOT, check=True, capture_output=True)
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    subprocess.run([*cmd, "--all-ops", "--install-dir", str(tmp_path / "reference")], cwd=REPO_ROOT, check=True,
                   capture_output=True)
    new = {p.name: p.read_bytes() for p in (tmp_path / "reference").iterdir()}
    for delay in (2.5, 3.0, 3.5, 4.0):
        process = subprocess.Popen([*cmd, "--all-ops"], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        for path in out.iterdir():
            if path.name.endswith(".tmp"):
                continue  # an abandoned temporary, never read by the build
            content = path.read_bytes()
            assert content in (old.get(path.name), new.get(path.name)), f"{path.name} is half-written"


def test_dump_ops_killed_half_way_leaves_the_previous_yaml(tmp_path: Path) -> None:
    output = tmp_path / "ops.yaml"
    output.write_text("- aten::previous\n")
    process = subprocess.Popen([sys.executable, "scripts/dump_ops.py", "--output", str(output), "--models-dir",
                                str(tmp_path / "m")], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    time.sleep(4.0)  # exporting models; the yaml is written last
    process.send_signal(signal.SIGKILL)
    process.wait()
    content = output.read_text()
    assert content == "- aten::previous\n" or content.startswith("# Operators the lite_predictor build carries")


def test_crash_guard_tells_a_start_up_crash_from_a_damaged_model() -> None:
    # A worker killed by a signal before the model is read is the runtime failing (a foreign CPU under
    # emulation, say), not a damaged file; after, it is reported for the phase it died in.
    program = REPO_ROOT / "build" / "crash_guard_check"
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "crash_guard_check: 7 passed, 0 failed"


# --- a model that assigns its attributes, run from several threads

class RemembersItsLastInput(torch.nn.Module):
    """Assigns a tensor attribute on every run (SET_ATTR): assigned from 4 threads at once, LibTorch's module object
    corrupts the heap (found by tests/differential_models.py), so such a model's runs are serialised."""

    def __init__(self) -> None:
        super().__init__()
        self.last = torch.zeros(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last = x.sum().reshape([1])
        return x * 2.0


@pytest.mark.parametrize("stage", [[], ["--no-specialize"]])
def test_a_model_that_assigns_its_attributes_runs_safely_from_several_threads(
    stage: list[str], predictor: Path, tmp_path: Path
) -> None:
    from predictor_runner import save_lite_model

    model = save_lite_model(RemembersItsLastInput(), tmp_path / "remembers.ptl")
    x = torch.randn(8)
    torch.save([x], tmp_path / "remembers.inputs.pt")
    torch.save([x * 2.0], tmp_path / "remembers.expected.pt")
    # 80,000 runs: before serialising, 6 of 6 such runs here died of a corrupted heap.
    run = run_predictor(predictor, model, "--parallel", "4", "--iters", "20000", "--warmup", "0", "--json", *stage)
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert report["outputs_match"] is True and report["parallel"]["outputs_identical"] is True
