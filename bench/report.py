"""One way for every benchmark to print its figures and hand them to the runner."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

RESULTS_ENV = "CHANGEBROKER_BENCH_RESULTS"


@dataclass(frozen=True)
class Figure:
    benchmark: str
    metric: str
    value: float
    unit: str
    baseline: float | None = None  # the same metric for the baseline, same run
    baseline_name: str = ""
    higher_is_better: bool = True

    @property
    def ratio(self) -> float | None:
        """Ours against the baseline: above 1 means better, whichever direction is better."""
        if not self.baseline or not self.value:
            return None
        return self.value / self.baseline if self.higher_is_better else self.baseline / self.value


def format_table(figures: list[Figure]) -> str:
    rows = [("benchmark", "metric", "value", "baseline", "ratio")]
    for f in figures:
        baseline = f"{f.baseline:,.1f} {f.unit} ({f.baseline_name})" if f.baseline else "-"
        ratio = f"{f.ratio:.2f}x" if f.ratio is not None else "-"
        rows.append((f.benchmark, f.metric, f"{f.value:,.1f} {f.unit}", baseline, ratio))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(figures: list[Figure]) -> None:
    """Print ``figures``; when run by ``python -m bench``, also record them for its summary."""
    print(format_table(figures), flush=True)
    target = os.environ.get(RESULTS_ENV)
    if target:
        with open(target, "a") as out:
            for figure in figures:
                out.write(json.dumps(asdict(figure)) + "\n")


def verdict(goal: str, missed: str) -> int:
    """A benchmark's exit status against its goal: 1, saying ``missed``, when it was missed."""
    if missed:
        print(f"over the {goal} goal: {missed}")
        return 1
    print(f"within the {goal} goal")
    return 0
