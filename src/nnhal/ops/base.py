"""The operation framework: how each HAL operation is declared.

Every operation of ``OperationType`` is declared once, as data, by an
:class:`OpDef` in its family module (``nnhal/ops/<family>.py``, in that
module's ``OPS`` list) and collected by :mod:`nnhal.ops.registry`.

Three phases, as in Android's ``OperationResolver``:

* **signatures + validate**: operand types per position and the HAL version
  that allows them (checked generically by :func:`match_signature`), then an
  optional ``validate(ctx: OpInfo)`` for further rules that need only types,
  shapes and constant values ("input 2 must be a constant", ranks...).  It
  raises :class:`OpValidationError`.  Used by model validation,
  ``getSupportedOperations`` and error messages.
* **prepare**: optional ``prepare(ctx: OpInfo) -> state`` run once per
  prepared model, with constant operand values available; whatever it returns
  reaches every execution as ``ExecContext.state`` (filter re-layouts,
  quantization multipliers...).  It must not depend on non-constant inputs.
* **execute**: ``execute(ctx: ExecContext) -> list[np.ndarray]`` gets the
  input tensors and the output operands' types, computes output shapes from
  the actual inputs and returns one array per output, in the output operand's
  storage dtype (see :data:`NUMPY_DTYPE`).  Errors at run time raise
  :class:`OpExecutionError` (the driver reports GENERAL_FAILURE).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Optional, Protocol, Sequence, Union

import numpy as np

from nnhal.hal import HalVersion, OperandLifeTime, OperandType, OperationType, SymmPerChannelQuantParams

T = OperandType


V1_0, V1_1, V1_2, V1_3 = HalVersion.V1_0, HalVersion.V1_1, HalVersion.V1_2, HalVersion.V1_3
# the AIDL versions whose operations and operand types this package implements (feature levels 6 and 7)
AIDL_V2, AIDL_V3 = HalVersion.AIDL_V2, HalVersion.AIDL_V3


class OpValidationError(Exception):
    """A model-time rule of an operation is broken (-> INVALID_ARGUMENT)."""


class OpExecutionError(Exception):
    """An operation cannot run on the values given (-> GENERAL_FAILURE)."""


# numpy storage dtype of every operand type's elements
NUMPY_DTYPE: dict[OperandType, np.dtype] = {
    T.FLOAT32: np.dtype(np.float32),
    T.INT32: np.dtype(np.int32),
    T.UINT32: np.dtype(np.uint32),
    T.TENSOR_FLOAT32: np.dtype(np.float32),
    T.TENSOR_INT32: np.dtype(np.int32),
    T.TENSOR_QUANT8_ASYMM: np.dtype(np.uint8),
    T.BOOL: np.dtype(np.bool_),
    T.TENSOR_QUANT16_SYMM: np.dtype(np.int16),
    T.TENSOR_FLOAT16: np.dtype(np.float16),
    T.TENSOR_BOOL8: np.dtype(np.bool_),
    T.FLOAT16: np.dtype(np.float16),
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.dtype(np.int8),
    T.TENSOR_QUANT16_ASYMM: np.dtype(np.uint16),
    T.TENSOR_QUANT8_SYMM: np.dtype(np.int8),
    T.TENSOR_QUANT8_ASYMM_SIGNED: np.dtype(np.int8),
    T.TENSOR_OEM_BYTE: np.dtype(np.uint8),
}



def _numpy_max_dims() -> int:
    for n in (64, 32):
        try:
            np.empty((1,) * n, np.uint8)
            return n
        except ValueError:
            continue
    return 32


# NOTE: the highest operand rank the numpy kernels run (issue 17 item 3).  HAL dimensions are a
# vec<uint32_t> of any length, but a numpy array has at most 64 axes (32 before numpy 2), and kernels
# reshape a tensor into more axes than it has (SPACE_TO_BATCH_ND's 4 into 6, broadcasting, GATHER's
# input rank + indices rank - 1...): half of numpy's limit leaves them that room.  A model operand of a
# higher rank makes the operations that use it unsupported (getSupportedOperations false, preparation
# GENERAL_FAILURE); request dimensions of a higher rank are refused at launch (GENERAL_FAILURE).
NUMPY_MAX_DIMS = _numpy_max_dims()
MAX_RANK = NUMPY_MAX_DIMS // 2

FLOAT_TENSOR_TYPES = frozenset({T.TENSOR_FLOAT32, T.TENSOR_FLOAT16})
QUANT8_ASYMM_TYPES = frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED})
# every fundamental operand type (for "any type" positions such as IF / WHILE operands)
ANY_TYPE = frozenset(t for t in OperandType if t < 10000)


# A position in a signature accepts one type, or any type of a set.
TypeSpec = Union[OperandType, frozenset]


@dataclass(frozen=True)
class Signature:
    """One accepted combination of operand types.

    ``inputs`` are the required inputs; ``optional`` are trailing inputs of
    which any prefix may be present (so the operation may have between
    ``len(inputs)`` and ``len(inputs) + len(optional)`` inputs).
    ``version`` is the first HAL version that allows this combination.
    """

    inputs: tuple
    outputs: tuple
    version: HalVersion = V1_0
    optional: tuple = ()
    # Any number (at least ``min_variadic``) of further inputs / outputs whose
    # types are in these specs (IF / WHILE operands, CONCATENATION tensors...).
    variadic_inputs: Optional[TypeSpec] = None
    variadic_outputs: Optional[TypeSpec] = None
    min_variadic_inputs: int = 0
    min_variadic_outputs: int = 0

    def accepts_count(self, n_inputs: int, n_outputs: int) -> bool:
        if self.variadic_inputs is not None:
            ok_in = n_inputs >= len(self.inputs) + self.min_variadic_inputs
        else:
            ok_in = len(self.inputs) <= n_inputs <= len(self.inputs) + len(self.optional)
        if self.variadic_outputs is not None:
            ok_out = n_outputs >= len(self.outputs) + self.min_variadic_outputs
        else:
            ok_out = n_outputs == len(self.outputs)
        return ok_in and ok_out

    def input_specs(self, n: int) -> list:
        specs = list(self.inputs) + list(self.optional)
        if self.variadic_inputs is not None:
            specs += [self.variadic_inputs] * (n - len(specs))
        return specs

    def output_specs(self, n: int) -> list:
        specs = list(self.outputs)
        if self.variadic_outputs is not None:
            specs += [self.variadic_outputs] * (n - len(specs))
        return specs


def _type_ok(spec: TypeSpec, t: OperandType) -> bool:
    return t in spec if isinstance(spec, frozenset) else t == spec


def _type_name(t: Any) -> str:
    # NOTE: OperandType members and resolved extension types (nnhal.ops.extension) have a name; others their number
    name = getattr(t, "name", None)
    if name is not None:
        return name
    return OperandType(t).name if t in OperandType._value2member_map_ else str(int(t))


def _spec_name(spec: TypeSpec) -> str:
    if isinstance(spec, frozenset):
        return "{" + ",".join(sorted(_type_name(s) for s in spec)) + "}"
    return _type_name(spec)


def format_signature(sig: Signature) -> str:
    ins = [_spec_name(s) for s in sig.inputs] + [f"[{_spec_name(s)}]" for s in sig.optional]
    outs = [_spec_name(s) for s in sig.outputs]
    return f"({', '.join(ins)}) -> ({', '.join(outs)}) since HAL {sig.version.name}"


@dataclass
class OperandInfo:
    """What validation and prepare know of an operand: its type, declared
    shape and quantization, lifetime, and the value if it is a constant."""

    type: OperandType
    dimensions: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0
    channel_quant: Optional[SymmPerChannelQuantParams] = None
    lifetime: OperandLifeTime = OperandLifeTime.TEMPORARY_VARIABLE
    value: Optional[np.ndarray] = None  # constants only (CONSTANT_COPY / CONSTANT_REFERENCE)
    extension: Optional[bytes] = None  # extraParams.extension (extension operand types)

    @property
    def is_constant(self) -> bool:
        return self.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)

    @property
    def is_omitted(self) -> bool:
        return self.lifetime == OperandLifeTime.NO_VALUE

    @property
    def rank(self) -> int:
        return len(self.dimensions)


@dataclass
class OpInfo:
    """Validation / prepare view of one operation."""

    type: OperationType
    inputs: list[OperandInfo]
    outputs: list[OperandInfo]
    version: HalVersion = V1_3
    relaxed: bool = False
    # for IF / WHILE: the referenced subgraphs (hal.Subgraph) and the model
    subgraphs: Sequence[Any] = ()

    def constant(self, i: int) -> Optional[np.ndarray]:
        return self.inputs[i].value if i < len(self.inputs) else None

    def fail(self, msg: str) -> OpValidationError:
        return OpValidationError(f"{self.type.name}: {msg}")


@dataclass
class Tensor:
    """An operand's value at execution time.  ``data`` has the operand's
    storage dtype (NUMPY_DTYPE) and its actual shape; scalars are 0-d arrays;
    ``data`` is None for an omitted (NO_VALUE / hasNoValue) input."""

    type: OperandType
    data: Optional[np.ndarray]
    scale: float = 0.0
    zero_point: int = 0
    channel_quant: Optional[SymmPerChannelQuantParams] = None

    @property
    def shape(self) -> tuple[int, ...]:
        return () if self.data is None else tuple(self.data.shape)

    @property
    def omitted(self) -> bool:
        return self.data is None

    def dequantize(self) -> np.ndarray:
        """Real values as float32 (quantized types use scale / zeroPoint)."""
        if self.type in QUANTIZED_TYPES:
            if self.channel_quant is not None:
                scales = np.asarray(self.channel_quant.scales, np.float32)
                shape = [1] * self.data.ndim
                shape[self.channel_quant.channelDim] = -1
                return self.data.astype(np.float32) * scales.reshape(shape)
            return (self.data.astype(np.int32) - self.zero_point).astype(np.float32) * np.float32(self.scale)
        return self.data.astype(np.float32)


QUANTIZED_TYPES = frozenset(
    {T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_ASYMM,
     T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL}
)


@dataclass
class OutputSpec:
    """An output operand as declared in the model: type, dimensions (0 = not
    known until run time; () may also mean unknown rank) and quantization."""

    type: OperandType
    dimensions: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0
    channel_quant: Optional[SymmPerChannelQuantParams] = None

    @property
    def dtype(self) -> np.dtype:
        d = NUMPY_DTYPE.get(self.type)
        return d if d is not None else self.type.dtype  # NOTE: a resolved extension type (nnhal.ops.extension)


class SubgraphRunner(Protocol):
    """What control-flow operations (IF / WHILE) need of the execution running
    them; the executor implements it, so ops never import the executor."""

    loop_timeout_ns: int
    # only the verdict matters (a dry run of the reference: nnhal.engine.reference_check): kernels may check
    # their parameters, then skip their arithmetic and tables (outputs of the right shape suffice)
    dry_run: bool

    def run_subgraph(self, index: int, inputs: Sequence[Optional[np.ndarray]]) -> list[np.ndarray]:
        """Runs referenced subgraph ``index`` (a SUBGRAPH operand's value) on ``inputs``."""
        ...

    def subgraph_output_count(self, index: int) -> int:
        """The number of outputs of referenced subgraph ``index``."""
        ...


@dataclass
class ExecContext:
    """What an operation's ``execute`` sees."""

    type: OperationType
    inputs: list[Tensor]
    outputs: list[OutputSpec]
    relaxed: bool = False
    state: Any = None
    # control flow (IF / WHILE): the running execution, which runs referenced subgraphs
    executor: Optional[SubgraphRunner] = None

    @property
    def dry_run(self) -> bool:
        """Whether this is a dry run of the reference (:attr:`SubgraphRunner.dry_run`)."""
        return self.executor is not None and self.executor.dry_run

    def has(self, i: int) -> bool:
        """True if input i is present and not omitted."""
        return i < len(self.inputs) and self.inputs[i].data is not None

    def scalar(self, i: int, default: Any = None) -> Any:
        """The Python value of scalar input i, or ``default`` if absent/omitted."""
        if not self.has(i):
            return default
        return self.inputs[i].data.item()

    def fail(self, msg: str) -> OpExecutionError:
        return OpExecutionError(f"{self.type.name}: {msg}")


# A unit of prepare work an operation hands to the executor: ``function(items)`` does it for the items
# (in place), and gives each the result it would get alone, whatever else is in the list
PrepareJob = tuple[Callable[[list], None], list]


def prepare_now(steps: Generator[PrepareJob, None, Any]) -> Any:
    """The state a ``prepare_steps`` generator returns, its jobs run one by one as they come."""
    return run_prepare_jobs({0: (steps, None)})[0]


def run_prepare_jobs(pending: dict[Any, tuple[Generator[PrepareJob, None, Any], Optional[PrepareJob]]]) -> dict:
    """Drives several ``prepare_steps`` generators (``pending``: key -> (generator, the job it yielded
    first, or None: not started)) to their states (key -> state): in rounds, each round's jobs of one
    function in one call.  An exception of a job's function is raised inside the generators that gave
    it (as if each had done the work itself: an operation's prepare handles its own errors)."""
    states: dict = {}
    jobs = {}
    for key, (gen, job) in pending.items():
        if job is None:
            try:
                job = next(gen)
            except StopIteration as done:
                states[key] = done.value
                continue
        jobs[key] = (gen, job)
    while jobs:
        by_fn: dict[Any, list] = {}
        for key, (_, (fn, items)) in jobs.items():
            by_fn.setdefault(fn, []).append((key, items))
        errors: dict[Any, Exception] = {}
        for fn, parts in by_fn.items():
            try:
                fn([item for _, items in parts for item in items])
            except Exception as e:  # noqa: BLE001 - handed to the operations, which raise what they do not handle
                errors.update((key, e) for key, _ in parts)
        nxt = {}
        for key, (gen, _) in jobs.items():
            try:
                nxt[key] = (gen, gen.throw(errors[key]) if key in errors else gen.send(None))
            except StopIteration as done:
                states[key] = done.value
        jobs = nxt
    return states


@dataclass
class OpDef:
    """One operation: declared once, used by validation, the driver's
    supported-operations answer, the executor and error messages."""

    type: OperationType
    signatures: list[Signature]
    execute: Callable[[ExecContext], list]
    validate: Optional[Callable[[OpInfo], None]] = None
    prepare: Optional[Callable[[OpInfo], Any]] = None
    # Input positions that may be NO_VALUE / hasNoValue (checked generically)
    omittable_inputs: frozenset = frozenset()
    # Whether an input may be a zero-sized tensor (else GENERAL_FAILURE at run time)
    allow_zero_sized: bool = False
    # Whether the request may omit (hasNoValue) an output this operation writes
    allow_omitted_outputs: bool = False
    # A missing operand or a zero-sized input is BAD_DATA (INVALID_ARGUMENT)
    # rather than OP_FAILED (GENERAL_FAILURE): true of the operations Android
    # 11's CpuExecutor runs in its own switch (``allParametersPresent``)
    bad_data_on_missing_operand: bool = False
    # The compilation cache (nnhal.driver.cache): ``save_state(state, put)``
    # turns what ``prepare`` returned into msgpack-able values (dicts, lists,
    # str, int, float, bool, None), storing each array with ``put(array) ->
    # id``; ``load_state(value, get)`` rebuilds the state (``get(id) ->
    # read-only array``) without redoing prepare's work.  Without them a
    # cached model runs ``prepare`` again when loaded.
    save_state: Optional[Callable[[Any, Callable[[np.ndarray], int]], Any]] = None
    load_state: Optional[Callable[[Any, Callable[[int], np.ndarray]], Any]] = None
    # Control flow (IF / WHILE): the operation as a generator ``steps(ctx)`` that yields
    # (referenced subgraph index, inputs) for each subgraph it runs, is sent that subgraph's
    # outputs, and returns its own outputs; the executor runs it from its own stack (no
    # recursion, any nesting depth).  ``execute`` stays the form for any other runner.
    steps: Optional[Callable[[ExecContext], Any]] = None
    # Prepare in rounds (optional, beside ``prepare``, which must give the same state): a generator
    # ``prepare_steps(info)`` that yields jobs (``PrepareJob``: (function, items)), is sent None once the
    # function has run on them, and returns the state.  The executor runs the jobs of every operation of a
    # subgraph that share a function in one call (:func:`run_prepare_jobs`): a model's requantization
    # searches in one numpy pass instead of one per layer.
    prepare_steps: Optional[Callable[[OpInfo], Generator[PrepareJob, None, Any]]] = None
    # Outputs may have unknown (0) dimensions in the model (dynamic shapes).  All
    # ops allow it since HAL 1.2; IF / WHILE / control flow handle their own.
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            self.name = self.type.name


def match_signature(op: OpDef, in_types: Sequence[OperandType], out_types: Sequence[OperandType],
                    version: HalVersion = V1_3) -> Signature:
    """The first signature of ``op`` accepting these operand types at
    ``version``; raises OpValidationError with the accepted list otherwise."""
    candidates = []
    for sig in op.signatures:
        if not sig.accepts_count(len(in_types), len(out_types)):
            continue
        if all(_type_ok(s, t) for s, t in zip(sig.input_specs(len(in_types)), in_types)) and all(
            _type_ok(s, t) for s, t in zip(sig.output_specs(len(out_types)), out_types)
        ):
            if sig.version <= version:
                return sig
            candidates.append(sig)
    got = f"({', '.join(_type_name(t) for t in in_types)}) -> ({', '.join(_type_name(t) for t in out_types)})"
    if candidates:
        raise OpValidationError(
            f"{op.name} does not accept {got} before HAL {candidates[0].version.name} "
            f"(model is HAL {version.name})"
        )
    accepted = "; ".join(format_signature(s) for s in op.signatures[:8])
    more = f" and {len(op.signatures) - 8} more" if len(op.signatures) > 8 else ""
    raise OpValidationError(f"{op.name} does not accept {got}; accepted: {accepted}{more}")


# --------------------------------------------------------------------------
# small helpers shared by many kernels


def same_type_signatures(types: Sequence[OperandType], n_in: int, n_out: int = 1,
                         extra_in: Sequence[TypeSpec] = (), version: HalVersion = V1_0,
                         optional: Sequence[TypeSpec] = ()) -> list[Signature]:
    """Signatures where ``n_in`` tensor inputs and ``n_out`` outputs all share
    one type from ``types``, followed by ``extra_in`` fixed inputs."""
    return [
        Signature(tuple([t] * n_in) + tuple(extra_in), tuple([t] * n_out), version, tuple(optional))
        for t in types
    ]


def fused_activation(x: np.ndarray, act: int) -> np.ndarray:
    """FusedActivationFunc on float values."""
    if act == 0:
        return x
    if act == 1:
        return np.maximum(x, 0)
    if act == 2:
        return np.clip(x, -1, 1)
    if act == 3:
        return np.clip(x, 0, 6)
    raise OpExecutionError(f"unknown fused activation {act}")
