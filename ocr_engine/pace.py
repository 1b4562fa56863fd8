"""Seconds per page, by backend: what this engine has measured, for planners that budget time.

A planner that cuts page ranges must keep each range well inside a request timeout, and
pages cost very different amounts of time: a text layer reads in milliseconds, PP-OCR on
a CPU takes seconds per page, a dense table page several times the median. So the engine
keeps the last pages' wall times per backend (render plus recognition) and reports a high
percentile of them. Until it has seen enough pages, a backend's prior stands in, unless a
page already took longer than that prior.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

MIN_SAMPLES = 10  # below this, one fast page must not talk the estimate down
WINDOW = 256  # recent pages only: a new model version or device changes the pace
PERCENTILE = 90


class PageClock:
    def __init__(self, priors: dict[str, float], window: int = WINDOW) -> None:
        self.priors = dict(priors)
        self._samples: dict[str, deque[float]] = {}
        self._window = window
        self._lock = threading.Lock()

    def observe(self, backend: str, seconds: float) -> None:
        if seconds < 0:
            return
        with self._lock:
            self._samples.setdefault(backend, deque(maxlen=self._window)).append(seconds)

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()

    def estimate(self, backend: str) -> float:
        """Expected seconds of one page on ``backend``, erring on the slow side."""
        return self._row(backend)["estimate"]

    def _row(self, backend: str) -> dict[str, float | int | None]:
        with self._lock:
            samples = list(self._samples.get(backend, ()))
        prior = self.priors.get(backend, max(self.priors.values(), default=1.0))
        p50 = p90 = None
        if samples:
            p50, p90 = (round(float(v), 4) for v in np.percentile(samples, [50, PERCENTILE]))
        if len(samples) >= MIN_SAMPLES:
            estimate = p90
        else:
            estimate = max([prior, *samples])
        return {"estimate": round(float(estimate), 4), "prior": prior, "observed_p50": p50, "observed_p90": p90,
                "samples": len(samples)}

    def snapshot(self, backends: tuple[str, ...] = ()) -> dict[str, dict[str, float | int | None]]:
        """One row per backend with a prior or an observation, and per one of ``backends``."""
        with self._lock:
            names = sorted(set(self.priors) | set(self._samples) | set(backends))
        return {name: self._row(name) for name in names}
