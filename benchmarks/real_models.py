"""The real-model set of issue 21: models that their own libraries build, saved the way their users save them.

Run with the peers' python (build/peers_venv, made by benchmarks/peers_env.py from peers-requirements.txt,
which pins torchvision 0.28.0 and transformers beside the project's torch 2.13.0); never in .venv:

    build/peers_venv/bin/python -m benchmarks.real_models                  # every model, into build/real_models/
    build/peers_venv/bin/python -m benchmarks.real_models resnet18 distilbert --no-pte
    build/peers_venv/bin/python -m benchmarks.real_models --list

The models, random weights from fixed seeds (weights=None everywhere: nothing is downloaded), batch norms
given non-trivial statistics so that folding them is exercised:
  resnet18, efficientnet_b0, mobilenet_v3_large, shufflenet_v2_x1_0, regnet_x_400mf
                         torchvision classifiers on a 1x3x224x224 image, scripted
  mobilenet_v2_int8      torchvision.models.quantization.mobilenet_v2 (quantize=False), eager-mode post-training
                         quantization for the x86 engine: fused, calibrated on seeded random images, converted
  distilbert             transformers' DistilBertModel, default sizes, random init, token ids and an attention
                         mask of sequence length 128 (the last 28 tokens padding), traced with torch.jit.trace

For each model NAME, in --out:
  NAME.ptl               torch.jit.script(m.eval())._save_for_lite_interpreter(...) (torch.jit.trace for distilbert)
  NAME_frozen.ptl        torch.jit.freeze(the same)._save_for_lite_interpreter(...)
  NAME[_frozen].inputs.pt, NAME[_frozen].expected.pt
                         forward's arguments and eager PyTorch's outputs, flattened, as scripts/dump_ops.py writes
                         them (lite_predictor reads both beside the model by default)
  NAME.onnx              what ONNX Runtime runs: torch.onnx's TorchScript-based exporter at the benchmark's opset;
                         for mobilenet_v2_int8, ORT's own static QDQ int8 model of the same float network
                         (quant_pre_process, then quantize_static: per channel, QUInt8 activations, QInt8 weights,
                         7-bit weights on a CPU without VNNI as ORT's documentation advises, calibrated on the
                         same seeded images), exported from NAME.float.onnx; the float
                         network's outputs in NAME.float.expected.pt, which ORT's int8 model is checked against
  NAME.pte               ExecuTorch + XNNPACK (torch.export, to_edge_transform_and_lower), where it exports
  manifest.json          per model: its files, sizes, export times, the tolerance its outputs are checked with,
                         each peer file's check against NAME.expected.pt (or, under peer_checks, against
                         another reference within another tolerance, with the reason), and what was skipped and why

torchvision 0.28.0 is built for torch 2.13.0 but its C++ extension is the CUDA build (`_C.so` needs
libtorch_cuda.so and libc10_cuda.so), so it does not load beside the CPU wheel, and `import torchvision` then
fails in `_meta_registrations` ("operator torchvision::nms does not exist": it registers fake kernels for
`nms` and `qnms` whether or not the extension loaded). `import_torchvision` defines those two schemas first;
the classifiers call none of torchvision's C++ operators. transformers imports torchvision when it is
installed, so it is imported after.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from torch import Tensor, nn  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "build" / "real_models"
SEED = 0
IMAGE_SHAPE = (1, 3, 224, 224)
SEQUENCE_LENGTH = 128
PADDING = 28  # the attention mask's trailing zeros: traced with padding, so the trace keeps the mask's path
CALIBRATION_BATCHES = 4
QENGINE = "x86"
CLASSIFIERS = ("resnet18", "efficientnet_b0", "mobilenet_v3_large", "shufflenet_v2_x1_0", "regnet_x_400mf")
FROZEN_SUFFIX = "_frozen"

# What torchvision's _meta_registrations registers fake kernels for unconditionally (torchvision 0.28/0.29).
TORCHVISION_IMPORT_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}


def _has_schema(qualified_name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(qualified_name, "")
    except RuntimeError:
        return False
    return True


def import_torchvision() -> tuple[ModuleType, torch.library.Library | None]:
    """torchvision, imported beside a torch its C++ extension cannot load into, and the Library defining the
    operator schemas its import needs (None when every one was there already, as with a working extension or
    test_models' reference ops). Keep the Library alive while torchvision is used: dropping it removes them."""
    missing = {name: schema for name, schema in TORCHVISION_IMPORT_SCHEMAS.items()
               if not _has_schema(f"torchvision::{name}")}
    library = None
    if missing:
        library = torch.library.Library("torchvision", "FRAGMENT")
        for schema in missing.values():
            library.define(schema)
    import torchvision

    return torchvision, library


# ------------------------------------------------------------------------------------------------- the models

@dataclass(frozen=True)
class RealModel:
    """How one model is built (eval mode, seeded weights), fed and saved."""

    name: str
    build: Callable[[], nn.Module]
    example_inputs: Callable[[], tuple[Tensor, ...]]
    traced: bool = False  # saved with torch.jit.trace on the example inputs instead of torch.jit.script
    qengine: str | None = None  # built, run and saved under this quantized engine
    float_model: Callable[[], nn.Module] | None = None  # the float network a quantized model was made from


def randomize_batch_norms(model: nn.Module, generator: torch.Generator) -> nn.Module:
    """Batch norms with the kind of statistics a trained model has (torchvision's init makes them identities),
    so that a frozen model's conv + batch-norm folding and an unfrozen model's separate batch_norm compute
    something that would show a mistake."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine and m.track_running_stats:
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5, generator=generator)
                m.bias.uniform_(-0.1, 0.1, generator=generator)
                m.running_mean.uniform_(-0.1, 0.1, generator=generator)
                m.running_var.uniform_(0.5, 1.5, generator=generator)
    return model


def seeded_image(seed: int) -> tuple[Tensor, ...]:
    return (torch.rand(*IMAGE_SHAPE, generator=torch.Generator().manual_seed(seed)),)


def torchvision_classifier(torchvision: ModuleType, name: str) -> nn.Module:
    torch.manual_seed(SEED)
    model = getattr(torchvision.models, name)(weights=None)
    return randomize_batch_norms(model, torch.Generator().manual_seed(SEED + 3)).eval()


def float_quantizable_mobilenet_v2(torchvision: ModuleType) -> nn.Module:
    """torchvision's quantizable MobileNetV2 before quantization (ReLU, FloatFunctional residuals, identity
    Quant/DeQuantStubs): the float network both PyTorch's and ORT's int8 models are made from."""
    torch.manual_seed(SEED)
    model = torchvision.models.quantization.mobilenet_v2(weights=None, quantize=False)
    return randomize_batch_norms(model, torch.Generator().manual_seed(SEED + 3)).eval()


def calibration_batches() -> list[tuple[Tensor, ...]]:
    from test_models.quantization import seeded_batches

    return seeded_batches((IMAGE_SHAPE,), CALIBRATION_BATCHES, SEED + 2)


def quantized_mobilenet_v2(torchvision: ModuleType) -> nn.Module:
    """torchvision's recipe for its quantized MobileNetV2 (fuse_model, the engine's default qconfig, prepare,
    calibrate, convert) with PyTorch's eager-mode workflow, under the current engine (QENGINE)."""
    from test_models.quantization import quantize_static

    model = float_quantizable_mobilenet_v2(torchvision)
    return quantize_static(model, lambda m: m.fuse_model(), calibration_batches(), QENGINE).eval()


def distilbert(transformers: ModuleType) -> nn.Module:
    """DistilBertModel from a default DistilBertConfig (6 layers, 768 wide, 12 heads), random init. transformers
    5 dropped `torchscript=True`; return_dict=False is what makes its outputs a tuple the tracer accepts."""
    torch.manual_seed(SEED)
    config = transformers.DistilBertConfig(return_dict=False)
    return transformers.DistilBertModel(config).eval()


def distilbert_inputs(vocab_size: int) -> tuple[Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    input_ids = torch.randint(0, vocab_size, (1, SEQUENCE_LENGTH), generator=generator)
    attention_mask = torch.ones(1, SEQUENCE_LENGTH, dtype=torch.int64)
    attention_mask[:, SEQUENCE_LENGTH - PADDING:] = 0
    return input_ids, attention_mask


def real_models(torchvision: ModuleType, transformers: ModuleType) -> dict[str, RealModel]:
    models = {name: RealModel(name, lambda name=name: torchvision_classifier(torchvision, name),
                              lambda: seeded_image(SEED + 1))
              for name in CLASSIFIERS}
    models["mobilenet_v2_int8"] = RealModel(
        "mobilenet_v2_int8", lambda: quantized_mobilenet_v2(torchvision), lambda: seeded_image(SEED + 1),
        qengine=QENGINE, float_model=lambda: float_quantizable_mobilenet_v2(torchvision))
    vocab_size = transformers.DistilBertConfig().vocab_size
    models["distilbert"] = RealModel("distilbert", lambda: distilbert(transformers),
                                     lambda: distilbert_inputs(vocab_size), traced=True)
    return models


# mobilenet_v2_int8, not quantized_mobilenet_v2: that is the project's own test model, a different network.
MODEL_NAMES = (*CLASSIFIERS, "mobilenet_v2_int8", "distilbert")


# ------------------------------------------------------------------------------------------------- exporting

@dataclass
class Record:
    """What manifest.json says of one model."""

    name: str
    files: dict[str, dict[str, object]]
    atol: float
    checks: dict[str, str]
    skipped: dict[str, str]
    notes: dict[str, float]
    # A peer file checked against something other than NAME.expected.pt within `atol`: kind -> {"expected": file
    # name, "atol": tolerance, "why": the reason}. The benchmark's peer servers check their first run the same way.
    peer_checks: dict[str, dict[str, object]] = field(default_factory=dict)

    def add_file(self, kind: str, path: Path, seconds: float) -> None:
        self.files[kind] = {"path": path.name, "bytes": path.stat().st_size, "export_s": round(seconds, 2)}


class _Timer:
    def __enter__(self) -> _Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.seconds = time.perf_counter() - self.start


@contextmanager
def quiet() -> Iterator[None]:
    """TorchScript, the lite interpreter and the exporters warn about deprecations on every call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def save_lite(module: torch.jit.ScriptModule, path: Path) -> None:
    with quiet():
        module._save_for_lite_interpreter(str(path))


def export_lite(spec: RealModel, model: nn.Module, inputs: tuple[Tensor, ...], expected: list[Tensor],
                out: Path, record: Record) -> None:
    """NAME.ptl as users save it and NAME_frozen.ptl, each with its inputs and expected outputs beside it."""
    with _Timer() as timer, quiet():
        scripted = torch.jit.trace(model, inputs) if spec.traced else torch.jit.script(model)
        save_lite(scripted, out / f"{spec.name}.ptl")
    record.add_file("ptl", out / f"{spec.name}.ptl", timer.seconds)
    with _Timer() as timer, quiet():
        save_lite(torch.jit.freeze(scripted), out / f"{spec.name}{FROZEN_SUFFIX}.ptl")
    record.add_file("ptl_frozen", out / f"{spec.name}{FROZEN_SUFFIX}.ptl", timer.seconds)
    for stem in (spec.name, spec.name + FROZEN_SUFFIX):
        # torch.save's default zip format: LibTorch's reader (torch::jit::pickle_load) cannot read the legacy one.
        torch.save(list(inputs), out / f"{stem}.inputs.pt")
        torch.save(expected, out / f"{stem}.expected.pt")


def export_onnx(model: nn.Module, inputs: tuple[Tensor, ...], path: Path) -> None:
    """As benchmarks/ort_latency_server.py exports the project's models: the TorchScript-based exporter."""
    from benchmarks.latency_protocol import output_discarded
    from benchmarks.ort_latency_server import OPSET

    with quiet(), output_discarded():
        torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=OPSET)


def run_onnx(path: Path, inputs: tuple[Tensor, ...]) -> list[Tensor]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(o) for o in session.run(None, feeds)]


def cpu_has_vnni(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this x86 CPU has VNNI (AVX-512 or AVX) int8 dot products. Without it ORT's u8 x s8 kernels can
    saturate their 16-bit intermediate sums, which ORT's documentation counters with `reduce_range` (7-bit
    weights)."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return True  # not Linux on x86: nothing to go on; quantize as documented for VNNI machines
    return bool(flags & {"avx512_vnni", "avx_vnni", "avx512vnni", "avxvnni"})


def quantize_onnx_static(float_path: Path, path: Path) -> None:
    """ONNX Runtime's own static int8 model of a float model: quant_pre_process, then QDQ quantize_static
    (per channel, QUInt8 activations, QInt8 weights; 7-bit weights on a CPU without VNNI, as ORT advises),
    calibrated on the batches PyTorch's model was."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quant_pre_process,
                                          quantize_static)

    import onnx

    from benchmarks.latency_protocol import output_discarded

    (input_name,) = [i.name for i in onnx.load(str(float_path)).graph.input]

    class SeededImages(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches: Iterator[tuple[Tensor, ...]] = iter(calibration_batches())

        def get_next(self) -> dict[str, object] | None:
            batch = next(self.batches, None)
            return None if batch is None else {input_name: batch[0].numpy()}

    prepared = path.with_name(path.stem + ".preprocessed.onnx")
    try:
        with quiet(), output_discarded():
            quant_pre_process(str(float_path), str(prepared))
            quantize_static(str(prepared), str(path), SeededImages(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            reduce_range=not cpu_has_vnni())
    finally:
        prepared.unlink(missing_ok=True)


def export_pte(model: nn.Module, inputs: tuple[Tensor, ...], path: Path) -> None:
    """As benchmarks/executorch_latency_server.py exports the project's models."""
    from benchmarks.latency_protocol import output_discarded

    with output_discarded():  # torchao, which ExecuTorch imports, reports the CUDA kernels it cannot load
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower
    with quiet(), output_discarded():
        exported = torch.export.export(model, inputs)
        program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch()
    path.write_bytes(program.buffer)


def run_pte(path: Path, inputs: tuple[Tensor, ...]) -> list[Tensor]:
    from benchmarks.latency_protocol import output_discarded

    with output_discarded():  # and ExecuTorch's runtime logs what it reads of the CPU
        from executorch.runtime import Runtime

        method = Runtime.get().load_program(path).load_method("forward")
        return list(method.execute(list(inputs)))


def int8_agreement(ort: Tensor, torch_int8: Tensor, float_outputs: Tensor, step: float) -> dict[str, float]:
    """How far ORT's int8 model is from PyTorch's (in output quantization steps: their calibrations differ, so
    more than one step apart is expected) and how far each is from the float network they were both made from."""
    return {"ort_int8_vs_torch_int8_steps": round(float((ort - torch_int8).abs().max()) / step, 3),
            "ort_int8_vs_float_max_abs": float((ort - float_outputs).abs().max()),
            "torch_int8_vs_float_max_abs": float((torch_int8 - float_outputs).abs().max())}


INT8_PEER_SLACK = 2.0


def int8_peer_tolerance(int8_expected: list[Tensor], float_expected: list[Tensor]) -> float:
    """How far another runtime's int8 model of the same float network may be from the float network's outputs:
    1e-4 plus INT8_PEER_SLACK x the farthest PyTorch's own int8 model is from them."""
    from benchmarks.latency_protocol import ATOL

    return ATOL + INT8_PEER_SLACK * max(float((q - f).abs().max()) for q, f in zip(int8_expected, float_expected))


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300] if str(error).strip() else ''}"


def export_peer(record: Record, kind: str, path: Path, export: Callable[[], None],
                run: Callable[[], list[Tensor]], expected: list[Tensor], atol: float) -> None:
    """One peer file: exported (a failure is recorded as skipped, with the exporter's reason), run once and
    checked against the expected outputs as the benchmark's peer servers check them."""
    from benchmarks.latency_protocol import outputs_mismatch

    try:
        with _Timer() as timer:
            export()
    except Exception as error:  # noqa: BLE001  (any exporter failure is a result to report)
        path.unlink(missing_ok=True)
        record.skipped[kind] = _reason(error)
        return
    record.add_file(kind, path, timer.seconds)
    try:
        record.checks[kind] = outputs_mismatch(run(), expected, atol) or "ok"
    except Exception as error:  # noqa: BLE001
        record.checks[kind] = f"failed to run: {_reason(error)}"


def export_model(spec: RealModel, out: Path, onnx: bool, pte: bool) -> Record:
    from benchmarks.latency_protocol import ATOL
    from scripts.dump_ops import flatten_outputs
    from test_models.quantization import dequantized_scales, quantized_engine, quiet_workflow

    record = Record(spec.name, {}, ATOL, {}, {}, {})
    with quantized_engine(spec.qengine) if spec.qengine else nullcontext(), quiet_workflow():
        with _Timer() as timer:
            model, inputs = spec.build(), spec.example_inputs()
        record.files["build"] = {"build_s": round(timer.seconds, 2)}
        with torch.no_grad():
            expected = flatten_outputs(model(*inputs))
        if spec.qengine:
            # One output quantization step on top: another runtime's int8 kernels round differently.
            record.atol = ATOL + max(dequantized_scales(model, inputs))
        export_lite(spec, model, inputs, expected, out, record)
    if onnx:
        path = out / f"{spec.name}.onnx"
        if spec.float_model is None:
            export_peer(record, "onnx", path, lambda: export_onnx(model, inputs, path),
                        lambda: run_onnx(path, inputs), expected, record.atol)
        else:
            float_path = out / f"{spec.name}.float.onnx"
            float_model = spec.float_model()
            with torch.no_grad():
                float_expected = flatten_outputs(float_model(*inputs))
            export_peer(record, "onnx_float", float_path, lambda: export_onnx(float_model, inputs, float_path),
                        lambda: run_onnx(float_path, inputs), float_expected, ATOL)
            # The float network's outputs, beside its .onnx (NAME.float.expected.pt): what ORT's int8 model is
            # checked against (it is ORT's own quantization, ~1.5 output steps from PyTorch's int8 model).
            torch.save(float_expected, out / f"{spec.name}.float.expected.pt")
            int8_atol = int8_peer_tolerance(expected, float_expected)
            record.peer_checks["onnx"] = {
                "expected": f"{spec.name}.float.expected.pt", "atol": int8_atol,
                "why": (f"ORT's own static int8 model against the float network's outputs within {int8_atol:.4g} "
                        f"(1e-4 + {INT8_PEER_SLACK:g} x PyTorch's int8 model's own max distance from them): two "
                        "calibrations of one float network round differently, ~1.5 output steps apart")}
            if float_path.exists():
                export_peer(record, "onnx", path, lambda: quantize_onnx_static(float_path, path),
                            lambda: run_onnx(path, inputs), float_expected, int8_atol)
            if path.exists():
                record.notes.update(int8_agreement(run_onnx(path, inputs)[0], expected[0], float_expected[0],
                                                   record.atol - ATOL))
    if pte:
        path = out / f"{spec.name}.pte"
        if spec.qengine:
            record.skipped["pte"] = ("eager-mode quantized modules are not exportable (their packed conv "
                                     "parameters); ExecuTorch's int8 would need its own PT2E quantizer")
        else:
            export_peer(record, "pte", path, lambda: export_pte(model, inputs, path),
                        lambda: run_pte(path, inputs), expected, record.atol)
    return record


# ------------------------------------------------------------------------------------------------- the CLI

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"default: all of {', '.join(MODEL_NAMES)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the files go (default: %(default)s)")
    parser.add_argument("--no-onnx", action="store_true", help="skip the ONNX exports")
    parser.add_argument("--no-pte", action="store_true", help="skip the ExecuTorch exports (the slowest step)")
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in MODEL_NAMES]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODEL_NAMES)}")
    return args


def update_manifest(path: Path, records: list[Record]) -> None:
    """manifest.json keeps the models exported before and replaces those exported now."""
    manifest = json.loads(path.read_text()) if path.is_file() else {}
    manifest.setdefault("models", {})
    manifest["versions"] = versions()
    for record in records:
        manifest["models"][record.name] = {
            "atol": record.atol, "files": record.files, "checks": record.checks, "skipped": record.skipped,
            "notes": record.notes, "peer_checks": record.peer_checks,
            "frozen": record.name + FROZEN_SUFFIX}
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"torch": torch.__version__}
    for package in ("torchvision", "transformers", "onnxruntime", "executorch"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "absent"
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        print("\n".join(MODEL_NAMES))
        return 0
    try:
        torchvision, _library = import_torchvision()  # _library must outlive every use of torchvision
        import transformers  # after torchvision: transformers imports it when it is installed
    except ModuleNotFoundError as error:
        print(f"real_models: error: {error.name} is not installed here ({sys.executable}): run with the peers' "
              "python, made by python -c 'from benchmarks.peers_env import ensure_peers_python as e; print(e())'",
              file=sys.stderr)
        return 2

    transformers.logging.set_verbosity_error()  # it reports config defaults it does not recognise

    models = real_models(torchvision, transformers)
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    for name in args.models or MODEL_NAMES:
        with _Timer() as timer:
            record = export_model(models[name], args.out, onnx=not args.no_onnx, pte=not args.no_pte)
        records.append(record)
        update_manifest(args.out / "manifest.json", records)
        checks = ", ".join(f"{k} {v}" for k, v in record.checks.items())
        skipped = ", ".join(f"{k} skipped ({v})" for k, v in record.skipped.items())
        print(f"real_models: {name}: {', '.join(k for k in record.files if k != 'build')} in {timer.seconds:.1f} s"
              + (f"; {checks}" if checks else "") + (f"; {skipped}" if skipped else ""), flush=True)
    print(f"real_models: {len(records)} model(s) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
