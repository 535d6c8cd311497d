"""The benchmarks' own arithmetic and assumptions (`.venv/bin/python -m pytest benchmarks`): fast, no build needed."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.callgrind_profile import per_unit_self_cost, read_dump  # noqa: E402
from benchmarks.figures import Section  # noqa: E402
from benchmarks.latency import paired_ratio_interval, round_order  # noqa: E402
from benchmarks.per_op import MICRO_MODELS, category_of, loop_body_ops  # noqa: E402
from benchmarks.size import judge  # noqa: E402

CALLGRIND_DUMP = """\
# callgrind format
version: 1
desc: Trigger: Client Request: micro_add_loop|static|{k}
positions: line
events: Ir
summary: {total}

ob=(1) /lib/libtorch_cpu.so
fl=(1) ???
fn=(1) torch::jit::mobile::InterpreterState::run(std::vector<c10::IValue>&)
0 {run}
cfn=(2) at::cpu::add(at::Tensor const&, at::Tensor const&, c10::Scalar const&)
calls={k} 0
0 999999
fn=(2)
0 {add}
ob=(2) /bin/bench_per_op
fn=(3) c10::IValue::toScalar() const
0 {scalar}
"""


def write_dump(path: Path, k: int) -> Path:
    path.write_text(CALLGRIND_DUMP.format(k=k, total=1000 * k, run=500 * k, add=450 * k, scalar=50 * k))
    return path


@pytest.mark.parametrize("model", MICRO_MODELS, ids=lambda m: m.name)
def test_declared_ops_per_iteration_match_the_scripted_loop(model) -> None:
    assert loop_body_ops(model) == list(model.ops_per_iteration)


def test_dump_total_and_label_are_read(tmp_path: Path) -> None:
    dump = read_dump(write_dump(tmp_path / "callgrind.out.1.1", 2))
    assert dump.label == "micro_add_loop|static|2"
    assert dump.total == 2000


def test_self_cost_excludes_callees_inclusive_cost(tmp_path: Path) -> None:
    dump = read_dump(write_dump(tmp_path / "callgrind.out.1.1", 2))
    run = next(cost for name, cost in dump.self_cost.items() if name.startswith("torch::jit::mobile::Interpreter"))
    assert run == 1000  # the 999999 after calls= belongs to at::cpu::add's inclusive cost
    assert dump.self_cost["c10::IValue::toScalar() const"] == 100


def test_compressed_names_resolve_to_their_first_definition(tmp_path: Path) -> None:
    dump = read_dump(write_dump(tmp_path / "callgrind.out.1.1", 2))
    assert dump.self_cost["at::cpu::add(at::Tensor const&, at::Tensor const&, c10::Scalar const&)"] == 900


def test_per_unit_cost_is_the_difference_between_two_dumps(tmp_path: Path) -> None:
    small = read_dump(write_dump(tmp_path / "callgrind.out.1.1", 2))
    large = read_dump(write_dump(tmp_path / "callgrind.out.1.2", 5))
    costs = per_unit_self_cost(small, large, units=3)
    assert costs["c10::IValue::toScalar() const"] == pytest.approx(50)


def test_interpreter_functions_are_attributed_to_the_interpreter() -> None:
    assert category_of("at::RecordFunction::RecordFunction(at::RecordScope)") == "interpreter and RecordFunction"
    assert category_of("lightweight_dispatch::generated::aten_add_Tensor(std::vector<c10::IValue>&)") == (
        "generated kernels and binding")
    assert category_of("c10::Dispatcher::callBoxed(c10::OperatorHandle const&)") == "dispatcher and boxed wrappers"


def test_static_and_dynamic_run_adjacent_in_every_round() -> None:
    rng = random.Random(1)
    for _ in range(50):
        order = round_order(["static", "dynamic", "python_eager", "python_lite"], rng)
        assert sorted(order) == ["dynamic", "python_eager", "python_lite", "static"]
        assert abs(order.index("static") - order.index("dynamic")) == 1


def test_ratio_interval_brackets_the_median() -> None:
    rounds = [{"static": 1.0 + 0.01 * i, "dynamic": 1.0} for i in range(-10, 11)]
    low, high = paired_ratio_interval(rounds)
    assert low <= 1.0 <= high


def _size_section(selected_ops: int, selected_bytes: int, all_ops: int, all_bytes: int, helpers: int) -> Section:
    section = Section()
    for prefix, ops, loadable in (("size/selected", selected_ops, selected_bytes), ("size/all_ops", all_ops, all_bytes)):
        section.add(f"{prefix}/generated_ops", ops, "ops")
        section.add(f"{prefix}/object_bytes", 3 * loadable, "bytes")
        section.add(f"{prefix}/loadable_bytes", loadable, "bytes")
    section.add("size/selected/helpers_loadable_bytes", helpers, "bytes")
    return section


def test_size_judgement_reports_the_op_share_and_compares_ops_without_the_shared_helpers() -> None:
    # 10 of 1000 ops at 500 B each plus 20 kB of helpers in both builds: the same bytes per op.
    section = _size_section(10, 20_000 + 10 * 500, 1000, 20_000 + 1000 * 500, 20_000)
    judge(section)
    assert section.get("size/selected_fraction_of_all_ops/ops") == 0.01
    assert section.get("size/selected_per_op_over_all_ops_per_op/loadable_bytes") == 1.0
    assert section.get("size/selected_fraction_of_all_ops/loadable_bytes") == round(25_000 / 520_000, 4)
    assert [t.met for t in section.targets] == [True]  # equal bytes per op meets the per-op target


def test_size_target_is_missed_when_selected_ops_cost_more_than_the_average_op() -> None:
    section = _size_section(10, 1_000 + 10 * 750, 1000, 1_000 + 1000 * 500, 1_000)
    judge(section)
    assert section.get("size/selected_per_op_over_all_ops_per_op/loadable_bytes") == 1.5
    assert [t.met for t in section.targets] == [False]


def test_ratio_to_onnxruntime_is_per_round_and_judged_against_the_issue_target() -> None:
    from benchmarks.latency import Samples, record_ratio_to_ort

    samples = Samples(rounds=[{"static": 12.0, "onnxruntime": 10.0}, {"static": 11.0, "onnxruntime": 10.0},
                              {"static": 13.0, "onnxruntime": 10.0}])
    section = Section()
    record_ratio_to_ort("mobilenet_v2", 1, samples, section)
    assert section.get("latency/mobilenet_v2/threads_1/static_to_onnxruntime") == 1.2
    (target,) = section.targets
    assert target.met is False and "static <= 1.0 x ONNX Runtime" in target.name


def test_a_model_onnxruntime_cannot_run_has_no_ratio_and_says_why() -> None:
    from benchmarks.latency import Samples, record_ratio_to_ort

    samples = Samples(rounds=[{"static": 1.0}], failed={"onnxruntime": "UnsupportedOperatorError: torchvision::nms"})
    section = Section()
    record_ratio_to_ort("mobilenet_v2", 2, samples, section)
    assert not section.has("latency/mobilenet_v2/threads_2/static_to_onnxruntime")
    (target,) = section.targets
    assert target.met is None and "torchvision::nms" in target.detail
    record_ratio_to_ort("ssdlite_head", 1, samples, section)  # no target set for it: nothing recorded
    assert len(section.targets) == 1
