"""The VTS suite: which sections run on which models, cut into units of
work (one section over a batch of models, or one whole fixed section), and
the units run here, in local worker processes
(:class:`concurrent.futures.ProcessPoolExecutor`) or as Ray tasks
(:mod:`nnhal.conformance.vts.cluster`).  However they run, the cases come
back in unit order, so every way gives the same cases in the same order.

Each worker process or task opens its own device (or service connection)
with :func:`nnhal.conformance.vts.device.open_face`, once, and keeps it for
every unit it runs; the sections judge it through that face (HAL 1.3 or the
stable AIDL, ``Config.hal``).  A worker process that dies (a driver that crashes)
fails only the unit it was running: the units that had started are rerun one
at a time in a fresh process, and the one that kills it again is recorded as
a failure naming its exit; the others go on.
"""

from __future__ import annotations

import importlib
import logging
import math
import multiprocessing
import signal
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts.case import Case
from nnhal.conformance.vts.sections import DESCRIPTIONS, OPT_IN, PER_MODEL, SECTIONS  # noqa: F401 - re-exported


@dataclass(frozen=True)
class Config:
    """What every worker needs (plain data: it crosses processes and machines);
    ``random``: the random section's options (``nnhal.conformance.vts.random.RandomConfig``)."""
    device: str
    sample: Optional[int] = None
    log_level: int = logging.CRITICAL + 10
    hal: str = "hidl"
    random: Any = None


@dataclass
class Unit:
    """One section over a batch of models (none for a fixed section), or the
    random section over a range of case numbers (``cases``: start, count)."""
    index: int
    section: str
    models: tuple[VectorModel, ...] = ()
    cases: tuple[int, int] = (0, 0)

    @property
    def label(self) -> str:
        if self.cases[1]:
            a, n = self.cases
            return f"{self.section} case {a}" if n == 1 else f"{self.section} cases {a}-{a + n - 1}"
        if not self.models:
            return self.section
        first = self.models[0]
        more = f" +{len(self.models) - 1}" if len(self.models) > 1 else ""
        return f"{self.section} {first.spec}/{first.name}{more}"


def plan(sections: Sequence[str], models: Sequence[VectorModel], batch: int,
         random_cases: Sequence[int] = (), random_batch: int = 8) -> list[Unit]:
    """The units of a run, in the order their cases are reported (``random_cases``: the random section's
    case numbers, consecutive, in units of ``random_batch``)."""
    units: list[Unit] = []
    for section in SECTIONS + OPT_IN:
        if section not in sections:
            continue
        if section == "random":
            cases = list(random_cases)
            for k in range(0, len(cases), random_batch):
                chunk = cases[k:k + random_batch]
                units.append(Unit(len(units), section, cases=(chunk[0], len(chunk))))
            continue
        if section not in PER_MODEL:
            units.append(Unit(len(units), section))
            continue
        for k in range(0, len(models), batch):
            units.append(Unit(len(units), section, tuple(models[k:k + batch])))
    return units


# NOTE: models per unit in one process: few enough that the driver still keeps every variant of a batch's models
# (nnhal.driver.prepared_states: 32 models) when the next section of the batch asks for them (in_process_order)
ONE_PROCESS_BATCH = 4


def batch_size(n_models: int, workers: int) -> int:
    """Models per unit: in one process :data:`ONE_PROCESS_BATCH`; else about 8 units per worker (so the
    work balances), at most 64 models (so a unit takes seconds, and Ctrl-C loses little)."""
    if workers <= 1:
        return ONE_PROCESS_BATCH
    return max(1, min(64, math.ceil(n_models / (8 * workers))))


def in_process_order(units: Sequence[Unit]) -> list[Unit]:
    """The order one process runs ``units`` in (their cases are still reported in unit order): the
    per-model sections batch by batch -- a batch's models through generated, model, request, burst and
    qos one after another, while the device still keeps what it validated and compiled of them, rather
    than every model through a section before the next section starts -- then the fixed sections, in
    their order."""
    batches: dict[tuple, list[Unit]] = {}
    before: list[Unit] = []
    after: list[Unit] = []
    start = SECTIONS.index(PER_MODEL[0])
    for u in units:
        if u.section in PER_MODEL and u.models:
            batches.setdefault(tuple(id(vm) for vm in u.models), []).append(u)
        elif u.section in SECTIONS and SECTIONS.index(u.section) < start:
            before.append(u)
        else:
            after.append(u)
    return before + [u for batch in batches.values() for u in batch] + after


# --------------------------------------------------------------------------
# running one unit (in this process, a worker process or a Ray task)

_DEVICE: dict[str, Any] = {}
DIED = "the worker process died running it"


def device_for(config: Config) -> Any:
    """The device of this process, as the face ``config.hal`` shows it (opened once, kept for its units)."""
    key = f"{config.hal}:{config.device}"
    if key not in _DEVICE:
        from nnhal.conformance import logs
        from nnhal.conformance.vts.device import open_face

        logs.install(config.log_level)
        _DEVICE[key] = open_face(config.device, config.hal)
    return _DEVICE[key]


def forget_device(config: Config) -> None:
    face = _DEVICE.pop(f"{config.hal}:{config.device}", None)
    if face is not None:
        face.close()


def _failure(unit: Unit, vm: Optional[VectorModel], message: str) -> Case:
    model = f"{vm.spec}/{vm.name}" if vm is not None else unit.label if unit.cases[1] else ""
    return Case(unit.section, unit.section, model, "", "the section runs", "raised", "fail", message)


def run_unit(config: Config, unit: Unit) -> list[Case]:
    """Every case of ``unit`` on this process's device; a section that raises
    (a driver that raises out of a HAL method) is a failed case naming it."""
    device = device_for(config)
    module = importlib.import_module(f"nnhal.conformance.vts.{unit.section}")
    if unit.cases[1]:
        try:
            return module.run_cases(device, config.random, *unit.cases)
        except Exception as e:  # noqa: BLE001
            return [_failure(unit, None, f"{type(e).__name__}: {e}")]
    if not unit.models:
        try:
            return module.run(device, config.device) if unit.section == "basic" else module.run(device)
        except Exception as e:  # noqa: BLE001
            return [_failure(unit, None, f"{type(e).__name__}: {e}")]
    out: list[Case] = []
    for vm in unit.models:
        too_new = device.too_new(vm.version)
        if too_new:  # NOTE: as the AIDL VTS's SkipIfDriverOlderThanTestModel (and a 1.3 device has no AIDL model)
            out.append(Case(unit.section, unit.section, f"{vm.spec}/{vm.name}", "", "", "unsupported", "unsupported",
                            too_new))
            continue
        try:
            out += module.run_model(device, vm, config.sample)
        except Exception as e:  # noqa: BLE001
            out.append(_failure(unit, vm, f"{type(e).__name__}: {e}"))
    return out


# --------------------------------------------------------------------------
# local worker processes

_STARTED: Any = None


def _init_worker(config: Config, started: Any) -> None:
    global _STARTED
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # NOTE: the parent decides what Ctrl-C stops
    _STARTED = started
    device_for(config)


def _run_in_worker(config: Config, unit: Unit) -> list[Case]:
    if _STARTED is not None:
        _STARTED.put(unit.index)
    return run_unit(config, unit)


def _terminate(pool: ProcessPoolExecutor) -> None:
    # NOTE: shutdown() waits for the units running; on Ctrl-C or a broken pool the workers are ended now
    # (the pool keeps its processes in a private attribute: there is no public way)
    procs = list(getattr(pool, "_processes", {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    # NOTE: not shutdown(wait=True): with its workers ended under it, the pool's feeder thread can block on
    # a full call queue for good (seen once in a loaded test run: Ctrl-C then no exit); each worker is
    # waited for with a bound instead, and killed if SIGTERM did not end it
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)


def run_local(units: Sequence[Unit], config: Config, jobs: int,
              on_done: Callable[[Unit, list[Case]], None], stop: Optional[Callable[[], bool]] = None) -> None:
    """Runs ``units`` in ``jobs`` worker processes (spawned: the parent may
    hold driver threads), calling ``on_done(unit, cases)`` as each ends.
    KeyboardInterrupt ends the workers and is re-raised."""
    ctx = multiprocessing.get_context("spawn")
    todo = list(units)
    isolated: list[Unit] = []
    while todo or isolated:
        if isolated:
            unit = isolated.pop(0)
            _run_pool([unit], config, 1, on_done, ctx, lone=True)
            continue
        todo, suspects = _run_pool(todo, config, jobs, on_done, ctx, stop=stop)
        # NOTE: a unit that was running when a worker died is rerun model by model, each alone (same index:
        # its cases still come in order)
        isolated += [Unit(u.index, u.section, (vm,)) for u in suspects for vm in u.models] + \
            [Unit(u.index, u.section, cases=(n, 1)) for u in suspects if u.cases[1] > 1
             for n in range(u.cases[0], u.cases[0] + u.cases[1])] + \
            [u for u in suspects if not u.models and u.cases[1] <= 1]


def _run_pool(units: list[Unit], config: Config, jobs: int, on_done: Callable[[Unit, list[Case]], None],
              ctx: Any, lone: bool = False, stop: Optional[Callable[[], bool]] = None) -> tuple[list[Unit], list[Unit]]:
    """One pool over ``units``: ([], []) when all ran, else (the units not
    started, the units running) when a worker died."""
    started = ctx.SimpleQueue()
    pool = ProcessPoolExecutor(max_workers=max(1, min(jobs, len(units))), mp_context=ctx,
                               initializer=_init_worker, initargs=(config, started))
    futures: dict[Future, Unit] = {pool.submit(_run_in_worker, config, u): u for u in units}
    done_ids: set[int] = set()
    try:
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            if stop is not None and stop():
                # NOTE: a time budget spent (the random section's --seconds): the units not started are dropped
                for f in pending:
                    f.cancel()
            for f in finished:
                if f.cancelled():
                    done_ids.add(futures[f].index)
                    continue
                unit = futures[f]
                try:
                    cases = f.result()
                except BrokenProcessPool:
                    continue
                except Exception as e:  # noqa: BLE001 - e.g. the device could not be opened in the worker
                    cases = [_failure(unit, None, f"{type(e).__name__}: {e}")]
                done_ids.add(unit.index)
                on_done(unit, cases)
            if any(isinstance(f.exception(), BrokenProcessPool) for f in finished if not f.cancelled()):
                break
        else:
            pool.shutdown(wait=True)
            return [], []
    except BaseException:
        _terminate(pool)
        raise
    codes = sorted({p.exitcode for p in getattr(pool, "_processes", {}).values() if p.exitcode})
    _terminate(pool)
    ran = set()
    while not started.empty():
        ran.add(started.get())
    left = [u for u in units if u.index not in done_ids]
    if lone:
        for u in left:
            on_done(u, [_failure(u, u.models[0] if u.models else None, f"{DIED} "
                                 f"(exit status {', '.join(map(str, codes)) or 'unknown'})")])
        return [], []
    if not ran & {u.index for u in left}:
        # NOTE: a worker died before a unit could say it started (e.g. receiving it): the suspects are
        # the first units handed out (the pool hands them out in order, at most one more than its workers)
        ran = {u.index for u in left[:jobs + 1]}
    return [u for u in left if u.index not in ran], [u for u in left if u.index in ran]
