"""Sleep reporting: the ``SleepReport`` builder, a progress bar and the CLI table."""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import asdict
from typing import Any

from ..types import SleepReport

log = logging.getLogger("causalmem")

__all__ = ["format_report", "make_report", "Progress", "Timer"]


class Progress:
    """A few-line progress bar on stderr (only when asked and the store is large)."""

    STAGES = ("judge", "load", "reactivation", "q_update", "supersession", "generalization", "decay",
              "hebbian", "rem", "commit")

    def __init__(self, enabled: bool, stream=None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def stage(self, name: str) -> None:
        if not self.enabled:
            return
        i = self.STAGES.index(name) + 1 if name in self.STAGES else 0
        n = len(self.STAGES)
        bar = "#" * i + "." * (n - i)
        line = f"sleep [{bar}] {i}/{n} {name}"
        if self.tty:
            self.stream.write("\r" + line.ljust(60))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


class Timer:
    def __init__(self, progress: Progress) -> None:
        self.elapsed: dict[str, float] = {}
        self.progress = progress
        self._t = time.perf_counter()
        self._t0 = self._t

    def start(self, name: str) -> None:
        self.progress.stage(name)
        self._name = name
        self._t = time.perf_counter()

    def stop(self) -> None:
        self.elapsed[self._name] = self.elapsed.get(self._name, 0.0) + time.perf_counter() - self._t

    def total(self) -> None:
        self.elapsed["total"] = time.perf_counter() - self._t0


_REPORT_FIELDS = set(SleepReport.__dataclass_fields__)


def make_report(**values: Any) -> SleepReport:
    """A SleepReport of the known fields (counts this version of SleepReport lacks are only logged)."""
    extra = {k: v for k, v in values.items() if k not in _REPORT_FIELDS}
    if extra:
        log.info("causalmem: sleep %s", extra)
    return SleepReport(**{k: v for k, v in values.items() if k in _REPORT_FIELDS})


_ROWS = (
    ("0 novelty gate", "diversity", "gate", "token diversity of the newest chunks"),
    ("1 reactivation", "reactivated", "reactivation", "valid edges replayed"),
    ("", "protected", None, "replay-protected (score ≥ 1.0)"),
    ("1.5 Q update", "q_updates", "q_update", "chunks whose Q-value rose"),
    ("1.7 supersession", "superseded", "supersession", "edges superseded"),
    ("", "annotated", None, "… of which annotated (still retrievable)"),
    ("", "judge_failures", None, "judge failures (old edge kept)"),
    ("", "judge_deferred", None, "pairs left for the next sleep"),
    ("", "redirects", None, "redirect edges old → new (meta refines)"),
    ("2 generalization", "merged", "generalization", "duplicate edges merged"),
    ("", "patterns", None, "cross-task pattern edges (meta repeated)"),
    ("3 decay + GC", "decayed", "decay", "edges decayed"),
    ("", "boosted", None, "edges boosted by recent access"),
    ("", "retired", None, "edges retired (below threshold)"),
    ("  hebbian", "hebbian_faded", "hebbian", "co-occurrence pairs faded"),
    ("", "hebbian_dropped", None, "co-occurrence pairs dropped"),
    ("4 REM transfer", "rem_links", "rem", "cross-task links (meta similar_to)"),
    ("", "transfer_links", None, "… same-shaped decisions, other task"),
)


def format_report(report: SleepReport) -> str:
    """A plain-text table of a ``SleepReport`` for the CLI."""
    data = asdict(report) if not isinstance(report, dict) else dict(report)
    elapsed = data.get("elapsed") or {}
    title = "sleep (dry run: nothing written)" if data.get("dry_run") else "sleep"
    lines = [title]
    if data.get("skipped_low_diversity"):
        lines.append(f"skipped: diversity {data.get('diversity', 0.0):.3f} below min_diversity")
        return "\n".join(lines)
    w0, w1, w2 = 18, 9, 44
    lines.append(f"{'stage':<{w0}} {'count':>{w1}}  {'what':<{w2}} {'time':>8}")
    lines.append("-" * (w0 + w1 + w2 + 12))
    for stage, key, tkey, what in _ROWS:
        if key not in data:  # a count this version of SleepReport does not carry
            continue
        value = data[key]
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        t = f"{elapsed[tkey]:.3f}s" if tkey and tkey in elapsed else ""
        lines.append(f"{stage:<{w0}} {shown:>{w1}}  {what:<{w2}} {t:>8}")
    lines.append("-" * (w0 + w1 + w2 + 12))
    if "total" in elapsed:
        lines.append(f"{'total':<{w0}} {'':>{w1}}  {'':<{w2}} {elapsed['total']:.3f}s")
    return "\n".join(lines)
