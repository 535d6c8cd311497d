"""The figures a benchmark produces: each a named value with its unit, so report.json can be diffed run to run."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Figure:
    """One measured value. `name` is a slash-separated path: "per_op/micro_add_loop/static/above_floor"."""

    name: str
    value: float | int | str | bool | None
    unit: str
    note: str = ""


@dataclass(frozen=True)
class Target:
    """One of the issue's targets, with the figures it was judged on."""

    name: str
    met: bool | None  # None: could not be judged (a model skipped, a measurement missing)
    detail: str


@dataclass
class Section:
    """The figures of one benchmark, what it skipped and why, the targets it judged, and supporting detail
    (per-function instruction counts, raw samples) that report.json keeps and report.md summarises."""

    figures: list[Figure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    def add(self, name: str, value: float | int | str | bool | None, unit: str, note: str = "") -> None:
        self.figures.append(Figure(name, value, unit, note))

    def get(self, name: str) -> float | int | str | bool | None:
        for figure in self.figures:
            if figure.name == name:
                return figure.value
        raise KeyError(f"no figure named {name!r}")

    def has(self, name: str) -> bool:
        return any(figure.name == name for figure in self.figures)


def as_json(section: Section) -> dict:
    return {
        "figures": [asdict(f) for f in section.figures],
        "skipped": section.skipped,
        "targets": [asdict(t) for t in section.targets],
        "details": section.details,
    }


def from_json(data: dict) -> Section:
    return Section(
        figures=[Figure(**f) for f in data["figures"]],
        skipped=list(data["skipped"]),
        targets=[Target(**t) for t in data["targets"]],
        details=dict(data["details"]),
    )
