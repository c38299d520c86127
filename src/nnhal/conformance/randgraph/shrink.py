"""Shrinking a failing random model to the smallest one that fails the same
way (Hypothesis's shrinking, on this generator's choices).

In order, each repeated while it helps, within a budget of candidates and
seconds:

* fewer operations, on the choices the model was drawn from (:mod:`.draw`):
  the draw cut after an operation, one operation's choices deleted, an
  operation *detached* (its anchor choice 0: a new model input instead of an
  earlier result, so the operations before it can go); the last operation
  first, where a failure usually shows;
* simpler parameters: each choice lowered (0 first: the default parameter,
  the smallest dimension, an input rather than a constant, plain data; then
  halved, then one less), the last operation's first, cuts retried after each
  success; a reserve of candidates is kept for
* the model itself: outputs dropped (and the operations only they needed), an
  operation cut out by turning the temporaries it computed into model inputs
  holding the same values, inputs made constants.

A candidate is kept when it is simpler (fewer operations, then outputs, then
model inputs, then a shortlex-smaller choice list) and ``still_fails(model)``
says it fails the same way (same stage, executor and status; for wrong values
the same first differing operation).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from nnhal.conformance.randgraph.draw import INDEX, SEED, NoChoice
from nnhal.conformance.randgraph.generator import Options, StepFailed, replay
from nnhal.conformance.randgraph.graph import CONST, INPUT, TEMP, Graph, Operand, RandomModel, Rejected


@dataclass
class Shrunk:
    model: RandomModel
    choices: Optional[list[int]]  # None once a pass on the model itself changed it
    tried: int = 0
    kept: int = 0
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)


def _key(model: RandomModel, choices: Optional[list[int]]) -> tuple:
    """Simpler is smaller: fewer operations, outputs, inputs, then a shortlex-smaller choice list."""
    return (model.op_count(), len(model.main.outputs), len(model.main.inputs),
            len(choices) if choices is not None else 0, choices or [])


class Shrinker:
    def __init__(self, options: Options, still_fails: Callable[[RandomModel], bool], max_tries: int = 400,
                 max_seconds: float = 120.0):
        self.options, self.still_fails = options, still_fails
        self.max_tries, self.deadline = max_tries, time.monotonic() + max_seconds
        self.seen: set[tuple] = set()
        self.result: Optional[Shrunk] = None

    def out_of_budget(self, reserve: int = 0) -> bool:
        r = self.result
        return r is not None and (r.tried >= self.max_tries - reserve or time.monotonic() > self.deadline)

    # ------------------------------------------------------------------
    def run(self, model: RandomModel, choices: list[int]) -> Shrunk:
        t0 = time.monotonic()
        self.result = Shrunk(model, list(choices))
        self.seen.add(tuple(choices))
        # NOTE: fewer operations first (what a reader needs most), the parameters then, with a reserve of
        # candidates kept for the passes on the model itself
        while not self.out_of_budget() and (self._fewer_operations() or self._detach()):
            pass
        reserve = min(80, self.max_tries // 4)
        while not self.out_of_budget(reserve) and self._lower_choices(reserve):
            while not self.out_of_budget(reserve) and (self._fewer_operations() or self._detach()):
                pass
        while not self.out_of_budget() and self._model_passes():
            pass
        self.result.seconds = time.monotonic() - t0
        return self.result

    def _try_choices(self, choices: list[int], what: str) -> bool:
        if self.out_of_budget():
            return False
        t = tuple(choices)
        if t in self.seen:
            return False
        self.seen.add(t)
        try:
            model, d = replay(choices, self.options)
        except (StepFailed, Rejected, NoChoice):
            return False
        return self._keep(model, list(d.choices), what)

    def _keep(self, model: RandomModel, choices: Optional[list[int]], what: str) -> bool:
        """A candidate simpler than the current model, kept when it still fails (``choices``: None once
        a pass on the model itself made it)."""
        cur = self.result
        n = 5 if choices is not None and cur.choices is not None else 3
        if _key(model, choices)[:n] >= _key(cur.model, cur.choices)[:n]:
            return False
        cur.tried += 1
        if not self.still_fails(model):
            return False
        cur.model, cur.choices = model, choices
        cur.kept += 1
        cur.steps.append(what)
        return True

    def _spans(self) -> list[tuple[int, int]]:
        """The operation spans of the current choices (replayed to find them)."""
        _, d = replay(self.result.choices, self.options)
        return [(s.start, s.end) for s in d.spans if s.label == "op" and s.end > s.start]

    def _fewer_operations(self) -> bool:
        """The draw cut after an operation (its "another operation?" flag 0), or one operation's choices
        deleted (with that flag)."""
        for start, _ in self._spans()[1:]:
            if self._try_choices(self.result.choices[:start - 1] + [0], "fewer operations"):
                return True
        for start, end in reversed(self._spans()):
            c = self.result.choices
            if start > 0 and self._try_choices(c[:start - 1] + c[end:], "an operation dropped"):
                return True
        return False

    def _detach(self) -> bool:
        """An operation's anchor choice set to 0 (a new model input rather than an earlier result), last
        operation first: the operations before it then feed nothing it needs, and go."""
        for start, end in reversed(self._spans()):
            c = list(self.result.choices)
            if end <= len(c) and c[start]:
                c[start] = 0
                if self._try_choices(c, "an operation detached from the earlier ones"):
                    return True
        return False

    def _lower_choices(self, reserve: int) -> bool:
        """Each choice lowered (0, half, one less), the last operation's first."""
        improved = False
        _, d = replay(self.result.choices, self.options)
        kinds = list(d.kinds)
        order = [i for start, end in reversed(self._spans()) for i in range(start, end)]
        order += [i for i in range(len(self.result.choices)) if i not in set(order)]
        for i in order:
            if self.out_of_budget(reserve) or i >= len(self.result.choices):
                continue
            v = self.result.choices[i]
            if not v:
                continue
            kind = kinds[i] if i < len(kinds) else INDEX
            for w in [0] if kind == SEED else sorted({0, v // 2, v - 1}):
                c = list(self.result.choices)
                if i >= len(c) or c[i] <= w:
                    continue
                c[i] = w
                if self._try_choices(c, "a choice lowered"):
                    improved = True
                    break
        return improved

    # ------------------------------------------------------------------
    def _try_model(self, model: RandomModel, what: str) -> bool:
        return not self.out_of_budget() and self._keep(model, None, what)

    def _model_passes(self) -> bool:
        improved = False
        main = self.result.model.main
        for k in list(main.outputs):
            if len(self.result.model.main.outputs) <= 1:
                break
            m = copy.deepcopy(self.result.model)
            if k not in m.main.outputs:
                continue
            m.main.outputs.remove(k)
            prune(m)
            if self._try_model(m, "an output dropped"):
                improved = True
        for j in range(len(self.result.model.main.ops)):
            m = cut(self.result.model, j)
            if m is not None and self._try_model(m, "an operation cut out"):
                improved = True
                break
        for k in list(self.result.model.main.inputs):
            m = copy.deepcopy(self.result.model)
            o = m.main.operands[k]
            if o.kind != INPUT or len(m.main.inputs) <= 1:
                continue
            o.kind = CONST
            m.main.inputs.remove(k)
            if self._try_model(m, "an input made a constant"):
                improved = True
        return improved


def prune(model: RandomModel) -> None:
    """Drops the main graph's operations whose results nothing uses, then its unused inputs."""
    g = model.main
    while True:
        used = {i for op in g.ops for i in op.inputs} | set(g.outputs)
        dead = [op for op in g.ops if not any(k in used for k in op.outputs)]
        if not dead:
            break
        g.ops = [op for op in g.ops if op not in dead]
    used = {i for op in g.ops for i in op.inputs} | set(g.outputs)
    g.inputs = [k for k in g.inputs if k in used]


def cut(model: RandomModel, j: int) -> Optional[RandomModel]:
    """``model`` without main operation ``j``: its results that later operations
    read become model inputs holding the values it computed (None when it
    has no such results, or they are model outputs)."""
    m = copy.deepcopy(model)
    g: Graph = m.main
    op = g.ops[j]
    later = {i for o in g.ops[j + 1:] for i in o.inputs}
    if any(k in g.outputs for k in op.outputs) or not any(k in later for k in op.outputs):
        return None
    for k in op.outputs:
        o: Operand = g.operands[k]
        if k in later and o.kind == TEMP:
            o.kind, o.declared = INPUT, None
            g.inputs.append(k)
    del g.ops[j]
    prune(m)
    return m


def shrink(model: RandomModel, choices: list[int], options: Options,
           still_fails: Callable[[RandomModel], bool], max_tries: int = 400, max_seconds: float = 120.0) -> Shrunk:
    """The smallest model found that ``still_fails``, from ``model`` drawn by ``choices``."""
    return Shrinker(options, still_fails, max_tries, max_seconds).run(model, choices)
