"""The choice sequence every random model is drawn from (Hypothesis's idea:
a generator reads plain integer choices, and shrinking edits those choices,
not the model).

Each choice is an index into a list of options ordered *simplest first*, so
choice 0 is always the simplest value (the smallest dimension, the default
parameter, "stop adding operations", "new model input", "plain data").  A
:class:`Draw` either takes its choices from a seeded generator (recording
them) or replays a given list; past its end every choice is 0, so a shorter
list is a simpler model, and a list edited anywhere still draws a model.
Spans mark the choices one operation consumed, so the shrinker can delete or
zero an operation's choices together.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import numpy as np

# the kinds of choices (how the shrinker treats them)
INDEX = "index"  # an option index: lowered step by step
SEED = "seed"  # a data seed: only tried at 0 (plain data), never searched
FLAG = "flag"  # a yes / no: 0 is no


class NoChoice(ValueError):
    """A choice among no options: the draw so far leaves nothing to choose (the caller draws again)."""


@dataclass
class Span:
    label: str
    start: int
    end: int = -1


@dataclass
class Draw:
    """A source of choices: ``rng`` draws new ones (None: past ``prefix``
    every choice is 0); ``prefix`` is replayed first."""

    rng: Optional[np.random.Generator] = None
    prefix: Sequence[int] = ()
    choices: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)

    @classmethod
    def seeded(cls, seed: int, case: int, attempt: int = 0) -> "Draw":
        """The draw of case ``case`` of seed ``seed`` (``attempt``: the next one
        when a draw makes no model): the same numbers, the same choices,
        wherever it runs."""
        return cls(np.random.default_rng([int(seed) & 0xFFFFFFFF, int(case) & 0xFFFFFFFF, int(attempt), 0x6E6E68]))

    @classmethod
    def replay(cls, choices: Sequence[int]) -> "Draw":
        return cls(None, list(choices))

    def _next(self, n: int, kind: str, weights: Optional[Sequence[float]] = None) -> int:
        if n <= 0:
            raise NoChoice("a choice among no options")
        i = len(self.choices)
        if i < len(self.prefix):
            v = min(int(self.prefix[i]), n - 1)  # NOTE: an edited list may hold a value beyond the options
        elif self.rng is None:
            v = 0
        elif kind == SEED:
            v = int(self.rng.integers(1, 1 << 31))
        elif weights is not None:
            w = np.asarray(weights, np.float64)
            v = int(self.rng.choice(n, p=w / w.sum()))
        else:
            v = int(self.rng.integers(0, n))
        self.choices.append(v)
        self.kinds.append(kind)
        return v

    # ------------------------------------------------------------------
    def index(self, n: int, weights: Optional[Sequence[float]] = None) -> int:
        """An index in [0, n), 0 the simplest."""
        return self._next(n, INDEX, weights)

    def pick(self, options: Sequence[Any], weights: Optional[Sequence[float]] = None) -> Any:
        """One of ``options`` (ordered simplest first)."""
        return options[self._next(len(options), INDEX, weights)]

    def integer(self, lo: int, hi: int, simplest: Optional[int] = None) -> int:
        """An int in [lo, hi]; choice 0 is ``simplest`` (default ``lo``), then outwards from it."""
        s = lo if simplest is None else simplest
        order = sorted(range(lo, hi + 1), key=lambda v: (abs(v - s), v < s))
        return order[self._next(len(order), INDEX)]

    def flag(self, p: float = 0.5) -> bool:
        """True with probability ``p`` (False is the simplest)."""
        if self.rng is not None and len(self.choices) >= len(self.prefix):
            v = int(self.rng.random() < p)
            self.choices.append(v)
            self.kinds.append(FLAG)
            return bool(v)
        return bool(self._next(2, FLAG))

    def seed(self) -> int:
        """A data seed (0: plain data)."""
        return self._next(1 << 31, SEED)

    def real(self, lo: float, hi: float, steps: int = 64, log: bool = False) -> float:
        """A float in [lo, hi] on a grid of ``steps`` points (geometric with
        ``log``); choice 0 is ``lo``."""
        k = self._next(steps, INDEX)
        t = k / (steps - 1) if steps > 1 else 0.0
        if log:
            return float(lo * (hi / lo) ** t)
        return float(lo + (hi - lo) * t)

    @contextlib.contextmanager
    def span(self, label: str) -> Iterator[Span]:
        """Marks the choices drawn inside as one unit (an operation's)."""
        s = Span(label, len(self.choices))
        self.spans.append(s)
        try:
            yield s
        finally:
            s.end = len(self.choices)
