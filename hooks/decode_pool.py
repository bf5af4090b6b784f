"""The pooled values of generated-token signals, for every live completion of
a plan at once.

A decode rule reads a signal's largest mean over ``window`` consecutive
generated-token scores (decode_probes.py). Each (completion, signal) has a
row here: its scores (bias included), how many there are, the best window
mean so far and where that window starts; each completion has a slot: how
many of its generated tokens were pooled. Kept as arrays so that a step's
hundreds of one-token decoders are pooled with a few array operations
(``add_one``) instead of Python per request and step: on a GPU that host
time was most of what a decode rule cost (benchmarks/README.md).
"""
from __future__ import annotations

import numpy as np

_FIRST_ROWS, _FIRST_TOKENS = 64, 256  # grown by doubling


class PoolTable:
    def __init__(self):
        self.scores = np.zeros((_FIRST_ROWS, _FIRST_TOKENS))  # row -> its scores, bias included
        self.count = np.zeros(_FIRST_ROWS, dtype=np.int64)  # row -> how many scores
        self.best = np.full(_FIRST_ROWS, -np.inf)  # row -> the largest whole-window mean so far
        self.best_start = np.zeros(_FIRST_ROWS, dtype=np.int64)  # row -> the first token of that window
        self.window = np.ones(_FIRST_ROWS, dtype=np.int64)
        self.bias = np.zeros(_FIRST_ROWS)
        self.scored = np.zeros(_FIRST_ROWS, dtype=np.int64)  # slot -> a completion's generated tokens pooled
        self._free_rows = list(range(_FIRST_ROWS - 1, -1, -1))
        self._free_slots = list(range(_FIRST_ROWS - 1, -1, -1))

    # -- rows and slots --------------------------------------------------------
    def row(self, window: int, bias: float) -> int:
        """A new (completion, signal) row, empty."""
        if not self._free_rows:
            n = len(self.count)
            self.scores = np.concatenate([self.scores, np.zeros_like(self.scores)])
            self.count, self.best_start, self.window = (np.concatenate([a, np.zeros_like(a)])
                                                        for a in (self.count, self.best_start, self.window))
            self.best = np.concatenate([self.best, np.full(n, -np.inf)])
            self.bias = np.concatenate([self.bias, np.zeros(n)])
            self._free_rows = list(range(2 * n - 1, n - 1, -1))
        row = self._free_rows.pop()
        self.count[row], self.best[row], self.best_start[row] = 0, -np.inf, 0
        self.window[row], self.bias[row] = window, bias
        return row

    def slot(self) -> int:
        """A new completion's slot, nothing pooled."""
        if not self._free_slots:
            n = len(self.scored)
            self.scored = np.concatenate([self.scored, np.zeros_like(self.scored)])
            self._free_slots = list(range(2 * n - 1, n - 1, -1))
        slot = self._free_slots.pop()
        self.scored[slot] = 0
        return slot

    def release(self, rows, slot: int) -> None:
        self._free_rows.extend(rows)
        self._free_slots.append(slot)

    def _fit(self, tokens: int) -> None:
        if tokens > self.scores.shape[1]:
            width = max(tokens, 2 * self.scores.shape[1])
            grown = np.zeros((self.scores.shape[0], width))
            grown[:, : self.scores.shape[1]] = self.scores
            self.scores = grown

    # -- pooling ---------------------------------------------------------------
    def add(self, row: int, values) -> bool:
        """Pool ``values`` (one completion's next scores of one signal, bias
        not included) one by one, as ``add_one`` pools a step's; whether its
        best window changed. A score that is not finite raises, after those
        before it were pooled: the rules' error modes decide, never a window
        that silently stops growing."""
        changed, rows = False, np.array([row])
        for value in np.asarray(values, dtype=np.float64).reshape(-1, 1):
            if not np.isfinite(value[0]):
                raise ValueError(f"generated token {int(self.count[row])} scored {value[0]}")
            changed |= bool(self.add_one(rows, value)[0])
        return changed

    def add_one(self, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
        """One finite score for each of ``rows`` (distinct; bias not
        included): pooled together. Which rows' best window changed."""
        n0 = self.count[rows]
        self._fit(int(n0.max()) + 1 if rows.size else 0)
        self.scores[rows, n0] = values + self.bias[rows]
        n = n0 + 1
        self.count[rows] = n
        windows = self.window[rows]
        changed = np.zeros(rows.size, dtype=bool)
        for w in np.unique(windows):  # one window length, as a rule
            at = np.flatnonzero((windows == w) & (n >= w))
            if not at.size:
                continue
            starts = n[at] - w
            means = self.scores[rows[at, None], starts[:, None] + np.arange(w)].sum(axis=1) / w
            better = means > self.best[rows[at]]
            won = rows[at][better]
            self.best[won], self.best_start[won] = means[better], starts[better]
            changed[at[better]] = True
        return changed

    def value(self, row: int) -> tuple[float, int]:
        return float(self.best[row]), int(self.best_start[row])

    def ready(self, row: int) -> bool:
        return bool(self.count[row] >= self.window[row])

    def scores_of(self, row: int) -> list[float]:
        return self.scores[row, : self.count[row]].tolist()
