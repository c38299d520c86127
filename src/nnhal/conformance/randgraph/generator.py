"""The generator of random models (NNSmith's and Android's
``RandomGraphGenerator`` idea, drawn from nnhal's own declarations).

A model is grown one operation at a time.  Each step picks an *anchor* (an
operand already in the graph, newest first, so most steps continue a chain;
an older one makes a fan-out or a diamond; none starts a new input), then an
operation whose declared signatures (``nnhal.ops``: operand types per
position, the HAL version of each) accept the anchor's type at the model's
HAL version, then a signature, and runs that operation's *recipe*
(:mod:`.recipes`): the per-operation strategy for the shapes and parameter
values the declaration cannot state (strides, axes, paddings, quantization,
layouts...).  Other tensor inputs are new model inputs or constants, or
existing operands of a fitting shape (diamonds, broadcasting, an output
consumed again).  The reference then checks the operation: its validation
and its executor run the operation alone on the operands' values
(:func:`.graph.evaluate`); a refusal, or outputs that are not meaningful
(NaN, infinities, every value saturated, all equal, values too close to a
discontinuity the next operation would amplify), and the step draws again (a
few times) or is dropped.  So every model is valid by construction and its
every intermediate value is known.

At the end the outputs are chosen (every unconsumed result, and some
consumed ones: outputs also read by a later operation), some temporaries'
dimensions are declared unknown (resolved at execution), and with a draw
the outputs' dimensions too.

Everything is drawn from a :class:`.draw.Draw`: the same seed and case, the
same options, the same model, wherever it is generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.conformance.randgraph.draw import Draw, NoChoice
from nnhal.conformance.randgraph.graph import (
    CONST,
    INPUT,
    NUMPY,
    OMITTED,
    QRANGE,
    QUANT,
    SHORT,
    SUBGRAPH,
    TEMP,
    Graph,
    Op,
    Operand,
    RandomModel,
    Rejected,
    evaluate,
    validate,
)

T = hal.OperandType
OT = hal.OperationType
V = hal.HalVersion

MAX_ELEMENTS = 4096  # NOTE: models stay small: a case is a few ms on the reference
ATTEMPTS = 4  # draws per step before the step is dropped
MAX_DEPTH = 2  # IF / WHILE nesting

# the data types a model may be drawn for, in the order of preference (the first is the simplest)
PRIMARY = (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_FLOAT16, T.TENSOR_INT32,
           T.TENSOR_BOOL8)
PRIMARY_WEIGHTS = (0.34, 0.2, 0.14, 0.16, 0.1, 0.06)


@dataclass(frozen=True)
class Options:
    """What the models are drawn from: the HAL version (a signature counts
    only from its version on), the operations (None: every operation with a
    recipe), at most ``max_operations`` operations in the main graph, and
    the (operation, data type) pairs the device under test claims (None:
    all)."""

    version: hal.HalVersion = V.V1_3
    ops: Optional[frozenset[str]] = None
    max_operations: int = 8
    claims: Optional[frozenset[tuple[str, str]]] = None

    def key(self) -> str:
        ops = ",".join(sorted(self.ops)) if self.ops else "all"
        return f"{self.version.name}/{ops}/{self.max_operations}"


class StepFailed(Exception):
    """This draw of the operation does not make a valid, meaningful operation."""


@dataclass
class OutSpec:
    type: T
    quant: Any = "same"  # "same" (input 0's), "auto" (from the float result's range), (scale, zp), None
    channel: Optional[tuple[tuple[float, ...], int]] = None


def real_range(o: Operand) -> tuple[float, float]:
    v = dequantize(o)
    return (float(v.min()), float(v.max())) if v.size else (0.0, 0.0)


def dequantize(o: Operand) -> np.ndarray:
    v = np.asarray(o.value)
    if o.channel is not None:
        shape = [1] * v.ndim
        shape[o.channel[1]] = -1
        return v.astype(np.float64) * np.asarray(o.channel[0]).reshape(shape)
    if o.type in QUANT:
        return (v.astype(np.float64) - o.zero_point) * o.scale
    return v.astype(np.float64)


# --------------------------------------------------------------------------
# data


def draw_data(rng: np.random.Generator, plain: bool, t: T, dims: Sequence[int], domain: str, scale: float, zp: int,
              limit: Optional[int] = None) -> np.ndarray:
    """Values of a new tensor (or scalar): ``domain`` says what the operation
    needs ("any", "positive", "nonneg", "nonzero", "near1", "unit", "small",
    "distinct", "index", "bool"); ``plain`` draws small whole numbers (what a
    shrunk reproducer shows); ``limit`` bounds indices."""
    n = int(np.prod(dims)) if len(dims) else 1
    if t in (T.TENSOR_BOOL8, T.BOOL) or domain == "bool":
        return (rng.random(n) < 0.5).reshape(dims)
    if domain == "index":
        return rng.integers(0, max(limit or 1, 1), n).astype(NUMPY[t]).reshape(dims)
    if t in QUANT:
        lo, hi = QRANGE[t]
        if domain == "distinct":
            span = hi - lo + 1
            q = (lo + rng.permutation(span)[:n] if n <= span else rng.integers(lo, hi + 1, n)).astype(np.int64)
            return q.astype(NUMPY[t]).reshape(dims)
        reals = draw_data(rng, plain, T.TENSOR_FLOAT32, dims, domain, 0.0, 0).astype(np.float64)
        # NOTE: the real values spread over about a third of the representable range
        q = np.rint(reals * (hi - lo) / 24.0) + zp if not plain else np.rint(reals) + zp
        return np.clip(q, lo, hi).astype(NUMPY[t]).reshape(dims)
    lo_hi = {"any": (-4.0, 4.0), "positive": (0.25, 4.0), "nonneg": (0.0, 4.0), "nonzero": (0.5, 4.0),
             "near1": (0.6, 1.4), "unit": (-1.0, 1.0), "small": (-2.0, 2.0), "distinct": (-4.0, 4.0)}[domain]
    lo, hi = lo_hi
    if t in (T.TENSOR_INT32, T.INT32, T.UINT32):
        ilo, ihi = (int(np.floor(lo)) * 2, int(np.ceil(hi)) * 2)
        if domain == "distinct":
            v = rng.permutation(np.arange(-n, n))[:n] if n > 0 else np.zeros(0, np.int64)
        else:
            v = rng.integers(max(ilo, 1) if domain in ("positive", "nonzero", "near1") else ilo, ihi + 1, n)
            if domain == "nonzero":
                v = v * rng.choice([-1, 1], n)
        return v.astype(NUMPY[t]).reshape(dims)
    if plain:
        v = rng.integers(int(np.ceil(lo)), int(np.floor(hi)) + 1, n).astype(np.float64)
        if domain in ("positive", "nonzero", "near1"):
            v = np.maximum(np.abs(v), 1.0)
        if domain == "nonzero":
            v = v * rng.choice([-1.0, 1.0], n)
        if domain == "distinct":
            v = rng.permutation(n).astype(np.float64) - n // 2
    elif domain == "distinct":
        v = (rng.permutation(n) + rng.uniform(0.1, 0.9, n)) * (8.0 / max(n, 1)) - 4.0
    else:
        v = rng.uniform(lo, hi, n)
        if domain == "nonzero":
            v = v * rng.choice([-1.0, 1.0], n)
    return v.astype(NUMPY[t]).reshape(dims)


# --------------------------------------------------------------------------
# a recipe's view of the step


class Build:
    """What a recipe uses to make one operation: its inputs in position
    order (:meth:`main` for the anchor, :meth:`tensor`, :meth:`param`,
    :meth:`ints`, :meth:`omit`), its outputs (:meth:`out`), named
    parameters (what the report and the coverage show) and guards
    (:meth:`guard`: checks on the values, e.g. a margin from a
    discontinuity)."""

    def __init__(self, gen: "Generator", op: OT, sig: Any, anchor: Optional[int], preserve: bool = False):
        self.gen, self.d, self.op, self.sig, self.anchor = gen, gen.d, op, sig, anchor
        self.preserve = preserve  # NOTE: a body's step: the result must keep the anchor's type, shape, quantization
        self.ins: list[int] = []
        self.outs: list[OutSpec] = []
        self.params: dict[str, Any] = {}
        self.guards: list[Callable[[list[Operand], list[np.ndarray]], str]] = []
        self.created: list[int] = []
        self.version = gen.options.version
        self.uniform_ok = False  # NOTE: results of one value repeated are fine (FILL)

    # ------------------------------------------------------------------
    @property
    def g(self) -> Graph:
        return self.gen.g

    def type(self, k: int) -> T:
        """The type the signature wants at input ``k`` (a set of types: one drawn)."""
        spec = self.sig.input_specs(max(k + 1, len(self.sig.inputs)))[k]
        if isinstance(spec, frozenset):
            return self.d.pick(sorted(spec))
        return spec

    def optional(self) -> int:
        """How many of the signature's optional inputs to give (0: none)."""
        return self.d.index(len(self.sig.optional) + 1) if self.sig.optional else 0

    def operand(self, k: int) -> Operand:
        return self.g.operands[k]

    def shape(self, rank: int, lo: int = 1, hi: int = 5) -> tuple[int, ...]:
        dims = tuple(self.d.integer(lo, hi) for _ in range(rank))
        while int(np.prod(dims)) > MAX_ELEMENTS:
            dims = tuple(max(lo, d // 2) for d in dims)
        return dims

    def quant(self, t: T) -> tuple[float, int]:
        """Quantization parameters of a new tensor of type ``t``."""
        if t not in QUANT:
            return 0.0, 0
        lo, hi = QRANGE[t]
        symm = t in (T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL)
        mid = 0 if symm or lo < 0 else (hi + 1) // 2
        if self.d.index(3, weights=(0.4, 0.3, 0.3)) == 0:
            scale = self.d.pick((0.5, 0.25, 1.0, 0.125, 2.0, 0.0625))
            zp = mid if symm else self.d.pick(sorted({mid, lo, hi, mid - 28, mid + 35}, key=lambda z: abs(z - mid)))
            return scale, zp
        scale = self.d.real(1.0 / 512, 4.0, steps=97, log=True)
        zp = mid if symm else self.d.integer(lo, hi, simplest=mid)
        return scale, zp

    # ------------------------------------------------------------------
    def new(self, t: T, dims: Sequence[int], *, domain: str = "any", scale: Optional[float] = None,
            zp: Optional[int] = None, channel: Optional[tuple] = None, role: str = "data",
            limit: Optional[int] = None, value: Optional[np.ndarray] = None) -> int:
        """A new model input or constant (``role`` "data": an input unless drawn
        constant; "weight" / "param": a constant unless drawn an input).  In a
        body every new tensor is a constant."""
        dims = tuple(int(x) for x in dims)
        if t == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and channel is None:
            ch = self.d.integer(0, len(dims) - 1) if dims else 0
            channel = (tuple(self.d.real(0.01, 0.5, steps=16, log=True) for _ in range(dims[ch] if dims else 1)), ch)
            scale, zp = 0.0, 0
        if scale is None:
            scale, zp = self.quant(t)
        if value is None:
            seed = self.d.seed()
            rng = np.random.default_rng(seed)
            value = draw_data(rng, seed == 0, t, dims, domain, scale, zp or 0, limit)
            if channel is not None and domain != "index":
                value = np.clip(np.rint(rng.normal(0, 40, value.shape)), -127, 127).astype(np.int8) \
                    if seed else np.clip(value.astype(np.int64), -127, 127).astype(np.int8)
        as_const = self.d.flag(0.15) if role == "data" else not self.d.flag(0.12)
        if self.gen.in_body or self.gen.forbid_inputs:
            as_const = True
        o = Operand(t, dims, float(scale or 0.0), int(zp or 0), channel, CONST if as_const else INPUT,
                    np.asarray(value, NUMPY[t]).reshape(dims))
        if as_const:
            o.reference = self.d.flag(0.25)
        k = self.g.add(o)
        self.created.append(k)
        if not as_const:
            self.g.inputs.append(k)
        return k

    def existing(self, t: T, fits: Callable[[Operand], bool], p_new: float = 0.6) -> Optional[int]:
        """An operand already in the graph of type ``t`` that ``fits`` (None: make a new one)."""
        cands = [k for k, o in enumerate(self.g.operands)
                 if o.type == t and o.kind in (INPUT, TEMP) and o.is_tensor and k not in self.created and fits(o)]
        if not cands:
            return None
        cands.reverse()  # NOTE: newest first
        w = [p_new] + [(1 - p_new) / len(cands)] * len(cands)
        k = self.d.index(len(cands) + 1, weights=w)
        return None if k == 0 else cands[k - 1]

    def main(self, t: Optional[T] = None, ranks: Sequence[int] = (1, 2, 3, 4), fits: Callable[[tuple], bool] = None,
             lo: int = 1, hi: int = 5, domain: str = "any", dims: Optional[Sequence[int]] = None,
             make: Optional[Callable[[], Sequence[int]]] = None) -> int:
        """The next input, the step's anchor when it fits, else new: a tensor
        of a rank in ``ranks`` that ``fits`` (a new one of ``dims``, or made by
        ``make``, or drawn)."""
        a = self.anchor
        if t is None:
            spec = self.sig.input_specs(max(len(self.ins) + 1, len(self.sig.inputs)))[len(self.ins)]
            if isinstance(spec, frozenset) and a is not None and self.operand(a).type in spec:
                t = self.operand(a).type
            else:
                t = self.type(len(self.ins))
        if a is not None:
            o = self.operand(a)
            if o.type == t and len(o.dims) in ranks and (fits is None or fits(o.dims)) and \
                    (dims is None or tuple(o.dims) == tuple(dims)):
                self.ins.append(a)
                return a
            if self.gen.in_body:
                raise StepFailed("the body's input does not fit")
        if dims is None and make is not None:
            dims = tuple(make())
        if dims is None:
            rank = self.d.pick(list(ranks))
            for _ in range(4):
                dims = self.shape(rank, lo, hi)
                if fits is None or fits(dims):
                    break
            else:
                raise StepFailed("no fitting shape drawn")
        k = self.new(t, dims, domain=domain)
        self.ins.append(k)
        return k

    def tensor(self, t: T, dims: Sequence[int], *, domain: str = "any", role: str = "data",
               connect: bool = True, scale: Optional[float] = None, zp: Optional[int] = None,
               channel: Optional[tuple] = None, limit: Optional[int] = None,
               fits: Optional[Callable[[Operand], bool]] = None, value: Optional[np.ndarray] = None) -> int:
        """The next input: a tensor of ``dims`` (an existing operand of that type
        and shape when ``connect`` and one is drawn, else new)."""
        dims = tuple(int(x) for x in dims)
        k = None
        if connect and channel is None and value is None and domain in ("any", "small"):
            k = self.existing(t, lambda o: tuple(o.dims) == dims and (
                scale is None or (o.scale == scale and o.zero_point == zp)) and (fits is None or fits(o)))
        if k is None:
            k = self.new(t, dims, domain=domain, scale=scale, zp=zp, channel=channel, role=role, limit=limit,
                         value=value)
        self.ins.append(k)
        return k

    def param(self, name: str, t: T, value: Any, show: Any = None, record: bool = True) -> Any:
        """A scalar parameter (a constant; sometimes a model input), recorded
        under ``name`` (as ``show`` when given; not when ``record`` is false:
        the recipe records a combined one, e.g. a stride as height x width)."""
        v = np.asarray(value, NUMPY[t]).reshape(())
        as_input = self.d.flag(0.04) and not self.gen.in_body and not self.gen.forbid_inputs
        o = Operand(t, (), 0.0, 0, None, INPUT if as_input else CONST, v)
        k = self.g.add(o)
        self.created.append(k)
        if as_input:
            self.g.inputs.append(k)
        self.ins.append(k)
        if record:
            self.params[name] = show if show is not None else v.item()
        return value

    def ints(self, name: str, values: Sequence[int], dims: Optional[Sequence[int]] = None) -> None:
        """A TENSOR_INT32 parameter (axes, shapes, paddings...)."""
        arr = np.asarray(values, np.int32)
        dims = tuple(dims) if dims is not None else arr.shape
        as_input = self.d.flag(0.04) and not self.gen.in_body and not self.gen.forbid_inputs
        o = Operand(T.TENSOR_INT32, dims, 0.0, 0, None, INPUT if as_input else CONST, arr.reshape(dims))
        k = self.g.add(o)
        self.created.append(k)
        if as_input:
            self.g.inputs.append(k)
        self.ins.append(k)
        self.params[name] = tuple(int(x) for x in arr.reshape(-1))

    def omit(self, name: str = "") -> None:
        """The next input omitted (NO_VALUE)."""
        t = self.type(len(self.ins))
        # NOTE: an omitted quantized operand still needs a valid scale (the operand checks come first)
        k = self.g.add(Operand(t, (), 1.0 if t in QUANT and t != T.TENSOR_QUANT8_SYMM_PER_CHANNEL else 0.0,
                               kind=OMITTED))
        self.created.append(k)
        self.ins.append(k)
        if name:
            self.params[name] = "omitted"

    def use(self, k: int) -> int:
        """An operand already made (e.g. a second reference to the same one)."""
        self.ins.append(k)
        return k

    def swap(self, i: int, j: int) -> None:
        """Exchanges inputs ``i`` and ``j`` (e.g. the broadcast operand first)."""
        self.ins[i], self.ins[j] = self.ins[j], self.ins[i]

    def out(self, t: T, quant: Any = "same", channel: Optional[tuple] = None) -> None:
        self.outs.append(OutSpec(t, quant, channel))

    def guard(self, check: Callable[[list[Operand], list[np.ndarray]], str]) -> None:
        self.guards.append(check)

    # ------------------------------------------------------------------
    def computed(self, k: int) -> bool:
        """Whether input operand ``k``'s values are computed (by an earlier operation, or a body's input)."""
        o = self.operand(k)
        return o.kind == TEMP or self.gen.in_body


# --------------------------------------------------------------------------
# the generator


class Generator:
    def __init__(self, d: Draw, options: Options):
        from nnhal.conformance.randgraph import recipes

        self.d, self.options = d, options
        self.recipes = recipes.RECIPES
        self.model = RandomModel(Graph(), version=options.version)
        self.g = self.model.main
        self.in_body = False
        self.forbid_inputs = False
        self.depth = 0
        self.allowed = self._allowed()

    def _allowed(self) -> dict[OT, list]:
        """Per operation, the signatures usable here (version, --ops, claims)."""
        from nnhal.ops import registry

        out: dict[OT, list] = {}
        for op, recipe in self.recipes.items():
            if self.options.ops is not None and op.name not in self.options.ops:
                continue
            opdef = registry.REGISTRY.get(op)
            if opdef is None:
                continue
            sigs = [s for s in opdef.signatures if s.version <= self.options.version and recipe.anchor(s)]
            if self.options.claims is not None:
                sigs = [s for s in sigs if any((op.name, SHORT.get(t, "")) in self.options.claims
                                               for t in recipe.anchor(s))]
            if sigs:
                out[op] = sigs
        return out

    def anchor_types(self) -> list[T]:
        return sorted({t for op, sigs in self.allowed.items() for s in sigs for t in self.recipes[op].anchor(s)})

    # ------------------------------------------------------------------
    def generate(self) -> RandomModel:
        if not self.allowed:
            raise StepFailed("no operation to draw from")
        types = [t for t in PRIMARY if t in self.anchor_types()] or self.anchor_types()
        w = [PRIMARY_WEIGHTS[PRIMARY.index(t)] if t in PRIMARY else 0.05 for t in types]
        primary = self.d.pick(types, weights=w)
        self.model.dtype = SHORT.get(primary, primary.name)
        self.model.relaxed = primary == T.TENSOR_FLOAT32 and self.d.flag(0.2)
        count = tries = 0
        while count < self.options.max_operations and tries < 2 * self.options.max_operations + 4 and \
                (count == 0 or self.d.flag(0.85)):
            tries += 1
            with self.d.span("op"):
                if self.step(primary) is not None:
                    count += 1
        if not self.g.ops:
            raise StepFailed("no operation could be drawn")
        self.finish()
        return self.model

    def candidates(self, t: T, preserving: bool = False) -> list[OT]:
        return sorted((op for op, sigs in self.allowed.items()
                       if any(t in self.recipes[op].anchor(s) for s in sigs)
                       and (not preserving or self.recipes[op].preserving)
                       and (self.depth < MAX_DEPTH or self.recipes[op].family != "control")),
                      key=lambda op: op.name)

    def forms(self, op: OT, t: T) -> int:
        """How many signatures of ``op`` take an anchor of type ``t`` here (at most 4: CAST has one per
        result type, which is not more to test)."""
        return min(4, sum(t in self.recipes[op].anchor(s) for s in self.allowed.get(op, ())))

    def pick_anchor(self, primary: T) -> Optional[int]:
        cands = [k for k, o in enumerate(self.g.operands) if o.kind in (INPUT, TEMP) and o.is_tensor]
        if not cands or not self.g.ops:
            return None
        cands.reverse()
        temps = [k for k in cands if self.g.operands[k].kind == TEMP]
        order = temps + [k for k in cands if k not in temps]
        w = [0.12] + [0.55] + [0.33 / max(len(order) - 1, 1)] * (len(order) - 1)
        k = self.d.index(len(order) + 1, weights=w[:len(order) + 1])
        return None if k == 0 else order[k - 1]

    def step(self, primary: T, anchor: Optional[int] = None, op: Optional[OT] = None,
             preserve: bool = False) -> Optional[int]:
        """Adds one operation (returns its index in the graph, None if every draw failed)."""
        if anchor is None and not preserve:
            anchor = self.pick_anchor(primary)
        t = primary if anchor is None else self.g.operands[anchor].type
        ops = [op] if op is not None else self.candidates(t, preserve)
        if not ops and anchor is not None and not preserve:
            anchor, t = None, primary
            ops = self.candidates(t)
        if not ops:
            return None
        # NOTE: a body's step tries other operations too: not every draw of one keeps the variable's spec
        for _ in range(3 if preserve and op is None else 1):
            # NOTE: as Android's generator, which draws a signature: an operation with more forms (padding
            # kinds, optional layout / dilation inputs, parameter types) is drawn more often
            chosen = op if op is not None else self.d.pick(ops, weights=[self.forms(o, t) for o in ops])
            done = self._attempts(chosen, t, anchor, preserve)
            if done is not None:
                return done
        return None

    def _attempts(self, op: OT, t: T, anchor: Optional[int], preserve: bool) -> Optional[int]:
        recipe = self.recipes[op]
        sigs = [s for s in self.allowed.get(op, []) if t in recipe.anchor(s)]
        if not sigs:
            return None
        for _ in range(ATTEMPTS):
            sig = self.d.pick(sigs)
            mark = (len(self.g.operands), len(self.g.inputs), len(self.model.referenced))
            b = Build(self, op, sig, anchor, preserve)
            try:
                recipe.build(b)
                return self.commit(b, preserve)
            except (StepFailed, Rejected, NoChoice):
                del self.g.operands[mark[0]:]
                del self.g.inputs[mark[1]:]
                del self.model.referenced[mark[2]:]
        return None

    def commit(self, b: Build, preserve: bool) -> int:
        ins = [self.g.operands[k] for k in b.ins]
        specs = self.out_specs(b)
        op = Op(b.op, list(b.ins), [], dict(b.params), dtype=self.dtype_of(b), signature=b.sig)
        values = evaluate(self.model, self.g, op, specs)
        if len(values) != len(specs):
            raise StepFailed("output count")
        for s, v in zip(specs, values):
            problem = meaningful(s, np.asarray(v), self.model.relaxed, b.uniform_ok)
            if problem:
                raise StepFailed(problem)
        for check in b.guards:
            problem = check(ins, values)
            if problem:
                raise StepFailed(problem)
        problem = self.stable(b, op, specs, values)
        if problem:
            raise StepFailed(problem)
        outs = []
        for s, v in zip(specs, values):
            v = np.asarray(v)
            outs.append(self.g.add(Operand(s.type, tuple(v.shape), s.scale, s.zero_point, s.channel, TEMP, v)))
        if preserve and self.g.operands[outs[0]].spec != self.g.operands[b.anchor].spec:
            del self.g.operands[outs[0]:]
            raise StepFailed("the result's type, shape or quantization differs from the input's")
        op.outputs = outs
        self.g.ops.append(op)
        return len(self.g.ops) - 1

    def stable(self, b: Build, op: Op, specs: list[Operand], values: list) -> str:
        """'' when the results hardly move under the differences a device may
        rightly have in the operation's computed inputs: a quantized input a
        step off in some places, a float one a few units in the last place off
        (relaxed or float16: about 2^-10), both the same way in about half the values.  A comparison that flips, an index
        that moves, a gain that turns one step into many (LOGISTIC of a
        coarse input, L2_NORMALIZATION of a short vector, DEQUANTIZE of a
        coarse scale) would make a right device fail: such a step is drawn
        again.  Judged with Android's small-graph criteria (the computed input
        means at least two operations); integer and boolean results must not
        move at all."""
        from nnhal.conformance.randgraph import criteria

        moved = [k for k in dict.fromkeys(b.ins) if b.computed(k) and self.g.operands[k].is_tensor and
                 (self.g.operands[k].type in QUANT or self.g.operands[k].type in (T.TENSOR_FLOAT32,
                                                                                   T.TENSOR_FLOAT16))]
        if not moved:
            return ""
        rng = np.random.default_rng([len(self.g.operands), int(op.type)])
        saved = {k: self.g.operands[k].value for k in moved}
        try:
            for k in moved:
                o = self.g.operands[k]
                v = np.asarray(o.value)
                if o.type in QUANT:
                    # NOTE: a device's rounding differs one way (a bias), in about half of the values
                    lo, hi = QRANGE[o.type]
                    moved = rng.random(v.shape) < 0.5
                    moved.reshape(-1)[rng.integers(0, max(v.size, 1))] = True
                    o.value = np.clip(v.astype(np.int64) + rng.choice([-1, 1]) * moved, lo, hi).astype(v.dtype)
                else:
                    eps = 2e-3 if (o.type == T.TENSOR_FLOAT16 or self.model.relaxed) else 2e-6
                    o.value = (v.astype(np.float64) * (1 + rng.choice([-eps, eps]) * (rng.random(v.shape) < 0.5)))\
                        .astype(v.dtype)
            try:
                other = evaluate(self.model, self.g, op, specs)
            except Rejected as e:
                return f"refused when its computed inputs move a little ({e})"
        finally:
            for k, v in saved.items():
                self.g.operands[k].value = v
        for s, a, e in zip(specs, other, values):
            a, e = np.asarray(a), np.asarray(e)
            if a.shape != e.shape:
                return "its result's shape depends on the last bits of its inputs"
            if e.dtype.kind in "biu" and s.type not in QUANT:
                if not np.array_equal(a, e):
                    return "a result that flips when its computed inputs move a little"
            elif not criteria.judge(a, e, s.type, criteria.SMALL, self.model.relaxed).ok:
                return "a result too sensitive to the last bits of its computed inputs"
        return ""

    def dtype_of(self, b: Build) -> str:
        """The data type an operation computes in: its first data input's (IF / WHILE: their first
        variable's, not the condition or a subgraph)."""
        data = [k for j, k in enumerate(b.ins) if self.g.operands[k].kind != SUBGRAPH and
                not (b.op == OT.IF and j == 0)]
        t = self.g.operands[data[0]].type if data else b.outs[0].type
        name = SHORT.get(t, t.name)
        return "relaxed" if name == "float32" and self.model.relaxed else name

    def out_specs(self, b: Build) -> list[Operand]:
        """The outputs' types and quantization; "auto": what covers the
        results of the same operation computed in float32."""
        # NOTE: "same" is the first quantized tensor input's (PACK's is input 1, after its axis)
        first = next((self.g.operands[k] for k in b.ins if self.g.operands[k].type in QUANT), None)
        specs = []
        auto = [s.type in QUANT and s.quant == "auto" for s in b.outs]
        ranges = float_ranges(self, b) if any(auto) else None
        for k, s in enumerate(b.outs):
            scale, zp = 0.0, 0
            if s.type in QUANT:
                if isinstance(s.quant, tuple):
                    scale, zp = s.quant
                elif s.quant == "auto" and ranges is not None:
                    scale, zp = covering_quant(s.type, ranges[k], self.d)
                elif first is not None and first.type in QUANT and first.channel is None:
                    scale, zp = first.scale, first.zero_point
                else:
                    scale, zp = b.quant(s.type)
            specs.append(Operand(s.type, (), float(scale), int(zp), s.channel, TEMP))
        return specs

    # ------------------------------------------------------------------
    def finish(self) -> None:
        """Outputs, unknown dimensions, and the whole model checked."""
        g = self.g
        used = g.consumers()
        temps = [k for op in g.ops for k in op.outputs]
        outs = [k for k in temps if used[k] == 0 or self.d.flag(0.15)]
        g.outputs = outs
        if self.options.version >= V.V1_2:
            for k in temps:
                if k in outs or not self.d.flag(0.15):
                    continue
                o = g.operands[k]
                o.declared = () if self.d.flag(0.3) else tuple(0 for _ in o.dims)
                if validate(self.model):
                    o.declared = None
            has_control = any(op.type in (OT.IF, OT.WHILE, OT.RANK) for _, op in self.model.all_ops())
            self.model.dynamic_outputs = not has_control and self.d.flag(0.1)
            if self.model.dynamic_outputs and validate(self.model):
                # NOTE: e.g. Android's CAST validation refuses an input of unknown dimensions (an output also
                # consumed) beside an output of known ones: the reference keeps that rule
                self.model.dynamic_outputs = False
        problem = validate(self.model)
        if problem:
            raise StepFailed(f"the model is not valid: {problem}")


def meaningful(spec: Operand, v: np.ndarray, relaxed: bool, uniform_ok: bool = False) -> str:
    """'' when a result is worth passing on: finite, not huge, not saturated
    everywhere, not one value repeated."""
    if v.size == 0 and spec.is_tensor:
        return "empty"
    if v.dtype.kind == "f":
        if not np.isfinite(v).all():
            return "not finite"
        big = 1e3 if (v.dtype == np.float16 or relaxed) else 1e4
        if v.size and np.abs(v).max() > big:
            return "too large"
    if spec.type in QUANT and v.size >= 4:
        lo, hi = QRANGE[spec.type]
        sat = np.count_nonzero((v == lo) | (v == hi)) / v.size
        if sat > 0.6:
            return "saturated"
    if not uniform_ok and v.size >= 4 and v.dtype.kind in "fiu" and spec.type != T.TENSOR_INT32 and \
            np.all(v == v.reshape(-1)[0]):
        return "every value the same"
    return ""


def covering_quant(t: T, rng: tuple[float, float], d: Draw) -> tuple[float, int]:
    """Quantization that represents [lo, hi] (widened by a drawn margin, 0 included)."""
    lo, hi = min(rng[0], 0.0), max(rng[1], 0.0)
    margin = d.pick((1.0, 1.25, 1.6, 0.9))
    qlo, qhi = QRANGE[t]
    width = max(hi - lo, 1e-3) * margin
    scale = float(np.float32(width / (qhi - qlo)))
    if t in (T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM):
        return float(np.float32(max(abs(lo), abs(hi), 1e-3) * margin / qhi)), 0
    zp = int(np.clip(np.rint(qlo - lo * margin / scale), qlo, qhi))
    return scale, zp


def float_ranges(gen: Generator, b: Build) -> Optional[list[tuple[float, float]]]:
    """The range of each output of ``b``'s operation computed on the real
    values in float32 (quantized tensors and int32 biases dequantized), or
    None when that twin is not a valid operation."""
    from nnhal.conformance.randgraph.graph import Graph as G

    twin = G()
    remap = {}
    for k in b.ins:
        if k in remap:
            continue
        o = gen.g.operands[k]
        if o.type in QUANT or (o.type == T.TENSOR_INT32 and o.scale > 0):
            remap[k] = twin.add(Operand(T.TENSOR_FLOAT32, o.dims, 0.0, 0, None, INPUT,
                                        dequantize(o).astype(np.float32)))
        else:
            remap[k] = twin.add(Operand(o.type, o.dims, o.scale, o.zero_point, o.channel,
                                        o.kind if o.kind in (CONST, OMITTED) else INPUT, o.value,
                                        subgraph=o.subgraph))
    specs = [Operand(T.TENSOR_FLOAT32 if s.type in QUANT else s.type, ()) for s in b.outs]
    op = Op(b.op, [remap[k] for k in b.ins], [])
    try:
        vals = evaluate(gen.model, twin, op, specs)
    except Rejected:
        return None
    out = []
    for v in vals:
        v = np.asarray(v, np.float64)
        out.append((float(v.min()), float(v.max())) if v.size else (0.0, 0.0))
    return out


GENERATE_ATTEMPTS = 8


def generate(seed: int, case: int, options: Options) -> tuple[RandomModel, Draw]:
    """The model of case ``case`` of seed ``seed`` (and the draw that made it;
    raises StepFailed when no draw makes one, e.g. no operation to draw from)."""
    problem = ""
    for attempt in range(GENERATE_ATTEMPTS):
        d = Draw.seeded(seed, case, attempt)
        try:
            return Generator(d, options).generate(), d
        except (StepFailed, NoChoice) as e:
            problem = str(e)
    raise StepFailed(problem or "no model could be drawn")


def single(op: OT, t: T, seed: int, options: Options) -> Optional[RandomModel]:
    """A model of the one operation ``op`` with an input of type ``t`` (the
    device probe), or None when no draw makes one."""
    for attempt in range(GENERATE_ATTEMPTS):
        gen = Generator(Draw.seeded(seed, int(op), attempt * 64 + int(t)), options)
        if op not in gen.allowed:
            return None
        try:
            if gen.step(t, op=op) is None:
                continue
            gen.finish()
            return gen.model
        except (StepFailed, NoChoice):
            continue
    return None


def replay(choices: Sequence[int], options: Options) -> tuple[RandomModel, Draw]:
    d = Draw.replay(choices)
    return Generator(d, options).generate(), d


@dataclass
class Recipe:
    """How one operation is drawn: ``build(b)`` makes its inputs and outputs;
    ``anchor(sig)`` is the type of input 0 a signature takes (None: the
    recipe does not use that signature); ``preserving``: it can keep its
    input's type, shape and quantization (a body of IF / WHILE);
    ``family`` (the report's grouping)."""

    op: OT
    build: Callable[[Build], None]
    family: str
    preserving: bool = False
    anchor: Callable[[Any], frozenset] = field(default=lambda s: first_types(s, 0))


def first_types(sig: Any, k: int) -> frozenset:
    """The types a signature takes at input ``k`` (what an anchor there may be)."""
    spec = sig.input_specs(max(k + 1, len(sig.inputs)))[k] if k < len(sig.inputs) + len(sig.optional) or \
        sig.variadic_inputs is not None else None
    if spec is None:
        return frozenset()
    return spec if isinstance(spec, frozenset) else frozenset({spec})
