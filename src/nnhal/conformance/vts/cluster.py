"""Running the VTS units as Ray tasks (``nnhal vts --cluster ADDRESS``;
``pip install 'nnhal[cluster]'``).

Each task runs one unit (a section over a batch of models, the models
shipped with it, so the nodes need no vector files) on the device its Ray
worker process opened (once, kept for every task that process runs): an
in-process driver, or a connection to a service of that name on the node
(a service is reached through its node's runtime directory: start it on
every node).  Tasks ask for one CPU each.  Results come back in unit order
whatever the order the tasks end in.  On Ctrl-C the tasks not finished are
cancelled (forced: their worker processes end) and the units that ended are
reported.
"""

from __future__ import annotations

import socket
from typing import Any, Callable, Sequence

from nnhal.conformance.vts.case import Case
from nnhal.conformance.vts.suite import Config, Unit, run_unit


class ClusterError(RuntimeError):
    """Ray is missing or the cluster cannot be reached: one line for the user."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClusterError("--cluster needs Ray: pip install 'nnhal[cluster]'") from None
    return ray


def _reachable(address: str) -> None:
    """Refuses at once an address where nothing listens (Ray itself retries for minutes)."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"--cluster {address}: give HOST:PORT of the cluster's head node, or auto")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise ClusterError(f"--cluster {address}: no Ray head node answers there ({e.strerror or e})") from None


def connect(address: str) -> Any:
    """Joins the Ray cluster at ``address`` (``auto``: the one this machine
    belongs to) as a driver; returns the ``ray`` module."""
    ray = _ray()
    _reachable(address)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ClusterError(f"--cluster {address}: cannot join the Ray cluster ({str(e).splitlines()[0]})") from None
    return ray


def _task(config: Config, unit: Unit) -> list[Case]:
    return run_unit(config, unit)


def run_cluster(units: Sequence[Unit], config: Config, address: str,
                on_done: Callable[[Unit, list[Case]], None]) -> int:
    """Runs ``units`` as Ray tasks on the cluster at ``address``, calling
    ``on_done(unit, cases)`` as each ends; returns the cluster's CPU count.
    KeyboardInterrupt cancels what has not ended and is re-raised."""
    ray = connect(address)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 0))
        remote = ray.remote(num_cpus=1, max_retries=0)(_task)
        config_ref = ray.put(config)
        pending = {remote.remote(config_ref, u): u for u in units}
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    unit = pending.pop(ref)
                    try:
                        cases = ray.get(ref)
                    except ray.exceptions.RayError as e:  # NOTE: a worker that died fails its unit, the rest go on
                        cases = [Case(unit.section, unit.section, unit.label, "", "the section runs", "task failed",
                                      "fail", str(e).splitlines()[0] if str(e) else type(e).__name__)]
                    on_done(unit, cases)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        return cpus
    finally:
        ray.shutdown()
