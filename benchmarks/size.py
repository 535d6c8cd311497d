"""Size and build time: the generated code for the default selection vs every CPU-reachable op (--all-ops).

Selected: `ninja -t clean generated_kernels` then `ninja generated_kernels` in build/, timed (codegen and
compile, at Ninja's default parallelism), with each step's time read back from .ninja_log. All-ops: the
objects in build_all/ (`./build.sh all-ops`) are reused when present, and the report says when they were
built and whether the generator changed since; `--rebuild-all-ops` builds them afresh (~3+ minutes).
Sizes are object-file bytes and, from `size`, the loadable bytes (text + data + bss) that would ship.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.figures import Section, Target

REPO_ROOT = Path(__file__).resolve().parent.parent
TARGET_FRACTION = 0.02  # the default selection's generated code at most 2% of the all-ops build's
SELECTED_TARGET = "generated_kernels"
ALL_OPS_TARGET = "all_ops_kernels"
HELPERS_TARGET = "lightweight_dispatch_unboxing_helpers"
HELPERS_OBJECT = f"CMakeFiles/{HELPERS_TARGET}.dir/lite_predictor/unboxing_helpers.cpp.o"
# What the generated code depends on besides the selection: a change here makes old all-ops objects stale.
GENERATOR_INPUTS = ("tools/*.py", "lite_predictor/unboxing_helpers.h", "lite_predictor/unboxing_helpers.cpp",
                    "lite_predictor/kernel_table.h", "cmake/codegen.cmake", "CMakeLists.txt")


class SizeError(Exception):
    """A build step or file the size benchmark needs, with what failed."""


@dataclass(frozen=True)
class ObjectSizes:
    count: int
    file_bytes: int
    text: int
    data: int
    bss: int

    @property
    def loadable(self) -> int:
        return self.text + self.data + self.bss


def object_sizes(objects: list[Path]) -> ObjectSizes:
    if not objects:
        raise SizeError("no object files to measure")
    done = subprocess.run(["size", "--format=berkeley", *map(str, objects)], capture_output=True, text=True, check=True)
    text = data = bss = 0
    for line in done.stdout.splitlines()[1:]:
        fields = line.split()
        text, data, bss = text + int(fields[0]), data + int(fields[1]), bss + int(fields[2])
    return ObjectSizes(len(objects), sum(o.stat().st_size for o in objects), text, data, bss)


def ninja_log(build_dir: Path) -> dict[str, tuple[int, int]]:
    """Each output's (start_ms, end_ms) from the most recent build step that produced it."""
    entries: dict[str, tuple[int, int]] = {}
    for line in (build_dir / ".ninja_log").read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _mtime, output, *_ = line.split("\t")
        entries[output] = (int(start), int(end))
    return entries


@dataclass(frozen=True)
class BuildTimes:
    wall_s: float | None  # the whole ninja run, when we ran it
    codegen_s: float
    compile_s: float  # the object steps' durations summed (contended when they ran in parallel)
    span_s: float  # first step start to last step end, from .ninja_log


def build_times(build_dir: Path, generated_subdir: str, objects: list[Path], wall_s: float | None) -> BuildTimes:
    log = ninja_log(build_dir)
    stamp = str(build_dir / generated_subdir / ".generated.stamp")
    if stamp not in log:
        raise SizeError(f"{build_dir}/.ninja_log has no codegen step for {generated_subdir}")
    steps = [log[stamp]]
    compile_ms = 0
    for obj in objects:
        key = str(obj.relative_to(build_dir))
        if key not in log:
            raise SizeError(f"{build_dir}/.ninja_log has no step for {key}")
        steps.append(log[key])
        compile_ms += log[key][1] - log[key][0]
    codegen = log[stamp][1] - log[stamp][0]
    span = max(end for _, end in steps) - min(start for start, _ in steps)
    return BuildTimes(wall_s, codegen / 1e3, compile_ms / 1e3, span / 1e3)


def kernel_objects(build_dir: Path, target: str, generated_subdir: str) -> list[Path]:
    """The generated shards, table and registration, plus the out-of-line conversions they all call
    (compiled once per build, counted in every build's generated code)."""
    generated = sorted((build_dir / "CMakeFiles" / f"{target}.dir" / generated_subdir).glob("*.o"))
    helpers = build_dir / HELPERS_OBJECT
    return generated + ([helpers] if generated and helpers.is_file() else [])


def generated_count(build_dir: Path, generated_subdir: str) -> int:
    report = json.loads((build_dir / generated_subdir / "codegen_report.json").read_text())
    return int(report["generated"])


def tool(name: str) -> str:
    """A build tool from PATH, or from the project's .venv (where requirements.txt installs cmake and ninja)."""
    found = shutil.which(name) or shutil.which(name, path=str(REPO_ROOT / ".venv" / "bin"))
    if found is None:
        raise SizeError(f"{name} not found on PATH or in .venv/bin: run ./build.sh first")
    return found


def ninja(build_dir: Path, *args: str) -> None:
    done = subprocess.run([tool("ninja"), "-C", str(build_dir), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SizeError(f"ninja -C {build_dir} {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")


def rebuild_timed(build_dir: Path, target: str) -> float:
    ninja(build_dir, "-t", "clean", target, HELPERS_TARGET)
    start = time.perf_counter()
    ninja(build_dir, target, HELPERS_TARGET)
    return time.perf_counter() - start


def newest_generator_input() -> float:
    return max(p.stat().st_mtime for pattern in GENERATOR_INPUTS for p in REPO_ROOT.glob(pattern))


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


def record_build(section: Section, prefix: str, ops: int, sizes: ObjectSizes, times: BuildTimes, note: str) -> None:
    section.add(f"{prefix}/generated_ops", ops, "ops")
    section.add(f"{prefix}/objects", sizes.count, "files")
    section.add(f"{prefix}/object_bytes", sizes.file_bytes, "bytes", note)
    section.add(f"{prefix}/loadable_bytes", sizes.loadable, "bytes", "text + data + bss of the objects (size)")
    section.add(f"{prefix}/text_bytes", sizes.text, "bytes")
    section.add(f"{prefix}/object_bytes_per_op", round(sizes.file_bytes / ops), "bytes/op")
    section.add(f"{prefix}/loadable_bytes_per_op", round(sizes.loadable / ops), "bytes/op")
    if times.wall_s is not None:
        section.add(f"{prefix}/build_wall_s", round(times.wall_s, 1), "s", "ninja clean + build of the target")
    section.add(f"{prefix}/codegen_s", round(times.codegen_s, 2), "s", note)
    section.add(f"{prefix}/compile_s_summed", round(times.compile_s, 1), "s",
                "object compile steps summed (Ninja runs several at once on 2 cores, so each is contended); " + note)
    section.add(f"{prefix}/build_span_s", round(times.span_s, 1), "s", "first step start to last step end; " + note)


def measure_selected(build_dir: Path, section: Section) -> None:
    wall = rebuild_timed(build_dir, SELECTED_TARGET)
    objects = kernel_objects(build_dir, SELECTED_TARGET, "generated")
    times = build_times(build_dir, "generated", objects, wall)
    record_build(section, "size/selected", generated_count(build_dir, "generated"), object_sizes(objects), times,
                 f"measured now ({iso(time.time())})")
    section.add("size/selected/helpers_loadable_bytes", object_sizes([build_dir / HELPERS_OBJECT]).loadable, "bytes",
                "the out-of-line conversions (unboxing_helpers.cpp), the same object in both builds")


def measure_all_ops(build_all_dir: Path, rebuild: bool, section: Section) -> None:
    objects = kernel_objects(build_all_dir, ALL_OPS_TARGET, "generated_all_ops")
    wall = None
    if rebuild or not objects:
        if not (build_all_dir / "build.ninja").is_file():
            python = REPO_ROOT / ".venv" / "bin" / "python"
            subprocess.run([tool("cmake"), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}", "-S", str(REPO_ROOT), "-B", str(build_all_dir),
                            f"-DPython3_EXECUTABLE={python}", "-DBUILD_ALL_OPS_KERNELS=ON"],
                           check=True, capture_output=True)  # fmt: skip
        wall = rebuild_timed(build_all_dir, ALL_OPS_TARGET)
        objects = kernel_objects(build_all_dir, ALL_OPS_TARGET, "generated_all_ops")
        note = f"measured now ({iso(time.time())})"
    else:
        built = min(o.stat().st_mtime for o in objects)
        stale = newest_generator_input() > built
        note = f"reused from {build_all_dir.name}/ built {iso(built)}" + (
            " (the generator changed since: rerun with --rebuild-all-ops)" if stale else "")
        section.add("size/all_ops/reused", True, "bool", note)
        section.add("size/all_ops/possibly_stale", stale, "bool")
    times = build_times(build_all_dir, "generated_all_ops", objects, wall)
    record_build(section, "size/all_ops", generated_count(build_all_dir, "generated_all_ops"), object_sizes(objects),
                 times, note)


def generated_symbol_bytes(binary: Path) -> int:
    """Bytes of the generated unboxing functions as linked into `binary` (nm symbol sizes)."""
    done = subprocess.run(["nm", "-S", "-C", "--defined-only", str(binary)], capture_output=True, text=True, check=True)
    total = 0
    for line in done.stdout.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and "lightweight_dispatch::generated::" in parts[3]:
            total += int(parts[1], 16)
    return total


def measure_binaries(build_dir: Path, build_all_dir: Path, section: Section) -> None:
    import torch

    predictor = build_dir / "lite_predictor"
    sizes = object_sizes([predictor])
    section.add("size/lite_predictor/file_bytes", sizes.file_bytes, "bytes",
                "the predictor's own binary; LibTorch is linked as shared libraries, not counted")
    section.add("size/lite_predictor/loadable_bytes", sizes.loadable, "bytes", "text + data + bss")
    section.add("size/lite_predictor/generated_function_bytes", generated_symbol_bytes(predictor), "bytes",
                "the generated unboxing functions as linked (nm symbol sizes, shared helpers not included)")
    all_ops = build_all_dir / "lite_predictor_all_ops"
    if all_ops.is_file():
        section.add("size/lite_predictor_all_ops/file_bytes", all_ops.stat().st_size, "bytes",
                    f"built {iso(all_ops.stat().st_mtime)}")
    libtorch = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    section.add("size/libtorch_cpu_so/file_bytes", libtorch.stat().st_size, "bytes", "for scale: the stock kernels")


def bytes_per_op_without_helpers(section: Section, prefix: str) -> float:
    helpers = section.get("size/selected/helpers_loadable_bytes")
    return (section.get(f"{prefix}/loadable_bytes") - helpers) / section.get(f"{prefix}/generated_ops")


def judge(section: Section) -> None:
    ops_fraction = section.get("size/selected/generated_ops") / section.get("size/all_ops/generated_ops")
    # With the same bytes per op in both builds, the selection's share of the bytes is its share of the ops:
    # the size target can only be met below this where the selected ops are cheaper than the average op.
    section.add("size/selected_fraction_of_all_ops/ops", round(ops_fraction, 4), "fraction",
                "the selection's share of the ops: the size fraction's floor at equal bytes per op")
    per_op = bytes_per_op_without_helpers(section, "size/selected") / bytes_per_op_without_helpers(section, "size/all_ops")
    section.add("size/selected_per_op_over_all_ops_per_op/loadable_bytes", round(per_op, 3), "ratio",
                "loadable bytes per selected op over per average op, the shared helpers left out of both")
    for measure in ("object_bytes", "loadable_bytes"):
        selected, all_ops = section.get(f"size/selected/{measure}"), section.get(f"size/all_ops/{measure}")
        fraction = selected / all_ops
        section.add(f"size/selected_fraction_of_all_ops/{measure}", round(fraction, 4), "fraction")
        section.targets.append(Target(
            f"size ({measure.replace('_', ' ')}): default selection <= {TARGET_FRACTION:.0%} of all-ops",
            fraction <= TARGET_FRACTION,
            f"{selected / 1e3:.0f} kB of {all_ops / 1e3:.0f} kB = {fraction:.1%} "
            f"(the selection is {ops_fraction:.1%} of the ops)",
        ))


def optimization_flag(build_dir: Path) -> str:
    """GENERATED_CODE_OPTIMIZATION as configured in `build_dir` (CMakeCache.txt)."""
    for line in (build_dir / "CMakeCache.txt").read_text().splitlines():
        if line.startswith("GENERATED_CODE_OPTIMIZATION:"):
            return line.split("=", 1)[1]
    raise SizeError(f"{build_dir}/CMakeCache.txt has no GENERATED_CODE_OPTIMIZATION: re-run ./build.sh")


def measure(build_dir: Path, build_all_dir: Path, rebuild_all_ops: bool = False) -> Section:
    section = Section()
    section.add("size/generated_code_optimization", optimization_flag(build_dir), "compiler flag")
    measure_selected(build_dir, section)
    ninja(build_dir)  # relink what depends on the rebuilt library (its objects are unchanged)
    measure_all_ops(build_all_dir, rebuild_all_ops, section)
    section.add("size/all_ops/generated_code_optimization", optimization_flag(build_all_dir), "compiler flag")
    measure_binaries(build_dir, build_all_dir, section)
    judge(section)
    return section
