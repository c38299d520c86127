"""Which (operation, data type) pairs a device claims: the random section
draws its models from those only, so a driver that supports a few
operations gets models it can run rather than a stream of refusals.

Each pair the generator can draw is probed with up to :data:`TRIES`
one-operation models (drawn from a fixed seed: the same probe, the same
answer) through the face's ``getSupportedOperations``; the pair is claimed when the
device takes one of them.  A device that takes an operation only in some
forms (some parameters, some shapes) still gets random forms of it: those it
refuses count as unsupported cases.
"""

from __future__ import annotations

from typing import Any

from nnhal import hal
from nnhal.conformance.face import as_face
from nnhal.conformance.randgraph.draw import Draw
from nnhal.conformance.randgraph.generator import Generator, Options, single
from nnhal.conformance.randgraph.graph import SHORT, copies_only

PROBE_SEED = 0x5EED
TRIES = 3


def pairs(options: Options) -> list[tuple[hal.OperationType, hal.OperandType]]:
    """Every (operation, anchor data type) the generator can draw under ``options``."""
    gen = Generator(Draw.replay([]), options)
    return sorted({(op, t) for op, sigs in gen.allowed.items() for s in sigs for t in gen.recipes[op].anchor(s)},
                  key=lambda p: (p[0].name, int(p[1])))


def claims(device: Any, options: Options) -> frozenset[tuple[str, str]]:
    """The (operation name, data type name) pairs ``device`` (an ``IDevice``
    of either interface, or a face) takes."""
    face = as_face(device)
    claimed: set[tuple[str, str]] = set()
    for op, t in pairs(options):
        for k in range(TRIES):
            m = single(op, t, PROBE_SEED + k, options)
            if m is None:
                continue
            model = copies_only(m.to_vector("probe", "probe")).build_model()
            try:
                status, flags, _ = face.supported(model)
            except Exception:  # noqa: BLE001 - a device that raises claims nothing here
                break
            if status == hal.ErrorStatus.NONE and flags and all(flags):
                claimed.add((op.name, SHORT.get(t, t.name)))
                break
    return frozenset(claimed)
