"""Seeded mutations of exported models, run through lite_predictor: nothing may die by a signal or hang.

    python tests/fuzz_models.py --count 5000          # the long run whose figures the README quotes

Mutations: byte flips anywhere, truncation, a zip entry dropped, an entry truncated or corrupted with
its checksum rewritten (so the damage reaches LibTorch's parsers rather than the archive check), and
pickles (bytecode, constants, data) corrupted the same way.
"""
from __future__ import annotations

import argparse
import io
import random
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
# Small models, so that hundreds of runs take a minute or two.
FUZZ_MODELS = ("out_variants", "arithmetic", "list_ops", "indexing", "tensor_creation", "resize_conv")
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Mutant:
    kind: str
    data: bytes


def flip_bytes(data: bytes, rng: random.Random) -> Mutant:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] ^= rng.randint(1, 255)
    return Mutant("byte_flip", bytes(out))


def truncate(data: bytes, rng: random.Random) -> Mutant:
    return Mutant("truncate", data[: rng.randrange(len(data))])


def _rewrite_zip(data: bytes, change: Callable[[str, bytes], bytes | None]) -> bytes:
    """A new archive with each entry passed through `change` (None drops it); checksums are recomputed."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            content = change(info.filename, source.read(info))
            if content is not None:
                target.writestr(info.filename, content)
    return out.getvalue()


def _pick_entry(data: bytes, rng: random.Random, suffix: str = "") -> str:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = [n for n in archive.namelist() if n.endswith(suffix)]
    return rng.choice(names)


def drop_entry(data: bytes, rng: random.Random) -> Mutant:
    victim = _pick_entry(data, rng)
    return Mutant("entry_dropped", _rewrite_zip(data, lambda name, content: None if name == victim else content))


def truncate_entry(data: bytes, rng: random.Random) -> Mutant:
    victim = _pick_entry(data, rng)

    def change(name: str, content: bytes) -> bytes:
        return content[: rng.randrange(len(content))] if name == victim and content else content

    return Mutant("entry_truncated", _rewrite_zip(data, change))


def _corrupt(content: bytes, rng: random.Random) -> bytes:
    out = bytearray(content)
    for _ in range(rng.randint(1, 4)):
        if out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def corrupt_entry(data: bytes, rng: random.Random) -> Mutant:
    victim = _pick_entry(data, rng)
    return Mutant("entry_corrupted",
                  _rewrite_zip(data, lambda name, content: _corrupt(content, rng) if name == victim else content))


def corrupt_pickle(data: bytes, rng: random.Random) -> Mutant:
    victim = _pick_entry(data, rng, ".pkl")
    return Mutant("pickle_corrupted",
                  _rewrite_zip(data, lambda name, content: _corrupt(content, rng) if name == victim else content))


MUTATIONS: tuple[Callable[[bytes, random.Random], Mutant], ...] = (
    flip_bytes, truncate, drop_entry, truncate_entry, corrupt_entry, corrupt_pickle,
)


@dataclass(frozen=True)
class Outcome:
    model: str
    kind: str
    seed: int
    returncode: int | None  # None: timed out
    stderr_tail: str


def run_mutant(predictor: Path, models_dir: Path, model: str, seed: int, workdir: Path) -> Outcome:
    rng = random.Random(seed)
    mutation = MUTATIONS[seed % len(MUTATIONS)]
    mutant = mutation((models_dir / f"{model}.ptl").read_bytes(), rng)
    path = workdir / f"{model}_{seed}.ptl"
    path.write_bytes(mutant.data)
    try:
        completed = subprocess.run(
            [str(predictor), str(path), "--input", str(models_dir / f"{model}.inputs.pt"), "--iters", "1",
             "--warmup", "0"],
            capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S, check=False,
        )
        returncode: int | None = completed.returncode
        tail = completed.stderr[-300:]
    except subprocess.TimeoutExpired:
        returncode, tail = None, "timed out"
    finally:
        path.unlink(missing_ok=True)
    return Outcome(model, mutant.kind, seed, returncode, tail)


def fuzz(predictor: Path, models_dir: Path, count: int, first_seed: int = 0, jobs: int = 1) -> list[Outcome]:
    """Run `count` mutants (seeds first_seed...), `jobs` predictor processes at a time; results in seed order."""
    seeds = range(first_seed, first_seed + count)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(
            lambda seed: run_mutant(predictor, models_dir, FUZZ_MODELS[seed % len(FUZZ_MODELS)], seed, Path(tmp)),
            seeds,
        ))


def summarize(outcomes: list[Outcome]) -> str:
    signals = [o for o in outcomes if o.returncode is not None and o.returncode < 0]
    hangs = [o for o in outcomes if o.returncode is None]
    codes = Counter(o.returncode for o in outcomes)
    kinds = Counter(o.kind for o in outcomes)
    guarded = [o for o in outcomes if "LibTorch crashed" in o.stderr_tail]
    lines = [
        f"mutants run: {len(outcomes)} ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})",
        f"exit codes: {', '.join(f'{c}: {n}' for c, n in sorted(codes.items(), key=lambda kv: str(kv[0])))}",
        f"deaths by signal: {len(signals)}, hangs: {len(hangs)}",
        f"crashes inside LibTorch caught by the crash guard and reported: {len(guarded)}",
    ]
    lines += [f"  SIGNAL {-o.returncode} {o.model} {o.kind} seed {o.seed}: {o.stderr_tail}" for o in signals]
    lines += [f"  HANG {o.model} {o.kind} seed {o.seed}" for o in hangs]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=300, help="number of mutants (default %(default)s)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="predictor processes at a time (default %(default)s)")
    parser.add_argument("--predictor", type=Path, default=REPO_ROOT / "build" / "lite_predictor")
    parser.add_argument("--models-dir", type=Path, default=REPO_ROOT / "build" / "models")
    args = parser.parse_args(argv)
    outcomes = fuzz(args.predictor, args.models_dir, args.count, args.first_seed, args.jobs)
    print(summarize(outcomes))
    return 0 if all(o.returncode is not None and o.returncode >= 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
