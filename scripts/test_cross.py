"""Run the aarch64 build (./build.sh cross) under emulation: every test model's static lite_predictor, one
iteration each, against its expected outputs, and the C++-only registration check. Prints a summary; exits 1
on any mismatch, failure or operator off the static path.

    python scripts/test_cross.py [--build build_aarch64] [--models-dir build/models] [--only NAME ...] [--jobs N]

qemu-aarch64 (Debian's qemu-user) runs the binaries with -L pointing at a folder this script makes in the
build folder: the cross toolchain's aarch64 libraries and an ARM /proc/cpuinfo (LibTorch reads the CPU's
description at start-up, and the x86 host's makes it crash under qemu). Float models are compared with their
eager outputs (build/models/NAME.expected.pt, 1e-5); quantized ones run with qnnpack, the engine ARM phones
have, against the stock lite interpreter's outputs on this host under qnnpack, within one quantization step
(engines round differently; the exported references were made with x86). Emulated timings say nothing about
ARM speed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from scripts.dump_ops import flatten_outputs  # noqa: E402
from test_models import MODELS, quantized_detection_head, quantized_lstm, quantized_mobilenet_v2  # noqa: E402
from test_models.torchvision_ops import ensure_torchvision_ops  # noqa: E402
from tools.quantized_ops import load_quantized_ops  # noqa: E402

CROSS_SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's libc6-arm64-cross, which g++-aarch64-linux-gnu brings
ARM_ENGINE = "qnnpack"
# One quantization step of a quantized model's outputs: how far two engines' results may differ.
OUTPUT_SCALE = {
    "quantized_mobilenet_v2": quantized_mobilenet_v2.output_scale,
    "quantized_detection_head": quantized_detection_head.output_scale,
    "quantized_detection_head_unfrozen": quantized_detection_head.output_scale,
    "quantized_lstm": quantized_lstm.output_scale,
}
# An ARM CPU's description, enough for LibTorch's CPU detection (cpuinfo) to start.
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1

"""


@dataclass
class Outcome:
    name: str
    ok: bool
    detail: str
    seconds: float


def qemu_root(build: Path) -> Path:
    """The folder qemu-aarch64 -L resolves the guest's absolute paths in first."""
    root = build / "qemu-root"
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "cpuinfo").write_text(ARM_CPUINFO)
    lib = root / "lib"
    if not lib.exists():
        lib.symlink_to(CROSS_SYSROOT / "lib")
    return root


def qemu_command(root: Path, binary: Path, *args: str) -> list[str]:
    return ["qemu-aarch64", "-L", str(root), str(binary), *args]


def qnnpack_reference(name: str, models_dir: Path, out_dir: Path) -> Path:
    """The stock lite interpreter's outputs on this host under qnnpack, saved as lite_predictor reads them."""
    out = out_dir / f"{name}.{ARM_ENGINE}.expected.pt"
    if out.is_file() and out.stat().st_mtime >= (models_dir / f"{name}.ptl").stat().st_mtime:
        return out
    from torch.jit.mobile import _load_for_lite_interpreter

    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = ARM_ENGINE
    try:
        module = _load_for_lite_interpreter(str(models_dir / f"{name}.ptl"))
        inputs = torch.load(models_dir / f"{name}.inputs.pt")
        with torch.no_grad():
            outputs = module(*inputs)
    finally:
        torch.backends.quantized.engine = previous
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(flatten_outputs(outputs), out)
    return out


def off_the_static_path(report: dict, allowed: set[str]) -> list[str]:
    """Operators the run reached through the dispatcher that quantized_ops.yaml does not list as having to."""
    return [op["name"] for op in report["ops"] if op["path"] == "dispatcher" and op["name"] not in allowed]


def model_arguments(name: str, models_dir: Path, references: Path) -> list[str]:
    """lite_predictor's arguments for one model; a quantized model's qnnpack reference is made here if stale (in
    this process, which switches torch's quantized engine for it: call this from one thread only)."""
    args = [str(models_dir / f"{name}.ptl"), "--iters", "1", "--warmup", "0", "--json"]
    if MODELS[name].qengine is not None:
        atol = 1.01 * OUTPUT_SCALE[name]()
        args += ["--qengine", ARM_ENGINE, "--expected", str(qnnpack_reference(name, models_dir, references)),
                 "--atol", repr(atol), "--rtol", "0"]
    return args


def run_model(name: str, args: list[str], build: Path, root: Path, allowed: set[str]) -> Outcome:
    start = time.monotonic()
    try:
        done = subprocess.run(qemu_command(root, build / "lite_predictor", *args), capture_output=True, text=True,
                              timeout=900)
    except subprocess.TimeoutExpired as error:
        return Outcome(name, False, f"timed out after {error.timeout:.0f} s", time.monotonic() - start)
    seconds = time.monotonic() - start
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        errors = [line for line in done.stderr.splitlines() if "MIDR_EL1" not in line]
        return Outcome(name, False, f"exit {done.returncode}: {errors[-1] if errors else 'no report'}", seconds)
    if done.returncode != 0 or report.get("outputs_match") is not True:
        return Outcome(name, False, f"exit {done.returncode}: {report.get('mismatch') or 'outputs not compared'}",
                       seconds)
    stray = off_the_static_path(report, allowed)
    if stray:
        return Outcome(name, False, "through the dispatcher: " + ", ".join(stray), seconds)
    static = sum(op["path"] == "static" for op in report["ops"])
    return Outcome(name, True, f"match (max abs diff {report['max_abs_diff']:.2g}); {static} static, "
                   f"{len(report['ops']) - static} other operators", seconds)


def run_registration_check(build: Path, root: Path) -> Outcome:
    start = time.monotonic()
    done = subprocess.run(qemu_command(root, build / "registration_check"), capture_output=True, text=True,
                          timeout=600)
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return Outcome("registration_check", done.returncode == 0, last, time.monotonic() - start)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", type=Path, default=REPO_ROOT / "build_aarch64",
                        help="the aarch64 build folder (default: %(default)s)")
    parser.add_argument("--models-dir", type=Path, default=REPO_ROOT / "build" / "models",
                        help="where dump_ops.py exported the test models (default: %(default)s)")
    parser.add_argument("--only", nargs="+", choices=sorted(MODELS), help="these models only")
    parser.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1,
                        help="emulated runs at once (default: the CPU count, %(default)s)")
    args = parser.parse_args()
    if shutil.which("qemu-aarch64") is None:
        print("test_cross: error: qemu-aarch64 is missing: install Debian's qemu-user (apt install qemu-user)",
              file=sys.stderr)
        return 2
    missing = [p for p in (args.build / "lite_predictor", args.build / "registration_check") if not p.is_file()]
    if missing:
        print(f"test_cross: error: {missing[0]} is missing: run ./build.sh cross first", file=sys.stderr)
        return 2
    ensure_torchvision_ops()  # the qnnpack references of models calling torchvision:: ops
    root = qemu_root(args.build)
    allowed = {name for name, op in load_quantized_ops().items() if op.dispatcher_reason is not None}
    names = args.only or sorted(MODELS)
    arguments = {name: model_arguments(name, args.models_dir, args.build / "references") for name in names}
    started = time.monotonic()
    outcomes = [run_registration_check(args.build, root)]
    # Each emulated run is one process, most of it qemu translating LibTorch's start-up: run --jobs at once.
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = [pool.submit(run_model, name, arguments[name], args.build, root, allowed) for name in names]
        for run in as_completed(runs):
            outcome = run.result()
            print(f"  {'ok  ' if outcome.ok else 'FAIL'} {outcome.name}: {outcome.detail} ({outcome.seconds:.1f} s)",
                  flush=True)
        outcomes += [run.result() for run in runs]
    failed = [o for o in outcomes if not o.ok]
    print(f"test-cross: {len(outcomes) - len(failed)} of {len(outcomes)} passed under qemu-aarch64 in "
          f"{time.monotonic() - started:.0f} s, {args.jobs} at a time ({outcomes[0].name}: {outcomes[0].detail})")
    for outcome in failed:
        print(f"  failed: {outcome.name}: {outcome.detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
