"""The folder tree is the layer map (../shared/STYLE.md): each top-level package
of ``src/nnhal`` is one layer; every module's imports (module level and inside
functions) point to its own package or a lower layer; no two top-level
packages import each other, directly or round a cycle; no module imports
another module's private (_underscore) name."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest layer first; a module may import its own layer or a lower one.  The
# longest matching prefix gives a module's layer.  One layer, one package (the
# public API module ``nnhal/__init__`` and the public aliases are the two exceptions, named as such).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("hal", ("nnhal.hal",)),  # HAL types and interfaces, HIDL 1.0-1.3 and AIDL 1-4 (nnhal.hal.aidl); nothing else
    ("platform", ("nnhal.platform",)),  # shared memory, fences, FMQ, burst packets, polling
    ("ops", ("nnhal.ops",)),  # the operations, declared as data; registry; quantization helpers
    ("tflite", ("nnhal.tflite",)),  # the TFLite format: schema, table, reader, writer (beside ops: see PEERS_APART)
    ("engine", ("nnhal.engine",)),  # validation, executor, capability timing
    ("driver", ("nnhal.driver",)),  # the HAL front end every driver shares; the backend interface
    ("drivers", ("nnhal.drivers",)),  # the backends and the device table (plugins)
    ("service", ("nnhal.service",)),  # the driver as a service: server, wire, client proxies
    ("api", ("nnhal", "nnhal.aidl")),  # nnhal/__init__: get_device, open_device, connect, list_devices; nnhal.aidl
    ("runtime", ("nnhal.runtime",)),  # the client runtime (model, compilation, partitions, burst controller)
    ("delegate", ("nnhal.delegate",)),  # TFLite models as Android's NNAPI delegate runs them
    ("conformance", ("nnhal.conformance",)),  # vectors, runners, VTS sections, reports
    ("tools", ("nnhal.tools",)),  # benches and developer tools
    ("cli", ("nnhal.cli", "nnhal.__main__")),  # the command line
    # API.md's public paths of moved modules (nnhal.memory, nnhal.fence, nnhal.burst): for users, never imported
    # by nnhal itself (checked below)
    ("aliases", ("nnhal.memory", "nnhal.fence", "nnhal.burst")),
]

# layers side by side that must not import each other either way
PEERS_APART = [("nnhal.ops", "nnhal.tflite"), ("nnhal.delegate", "nnhal.conformance")]

# NOTE: known upward imports, each with its reason; remove an entry once fixed
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    mods = {}
    for p in (SRC / "nnhal").rglob("*.py"):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


MODULES = _modules()


def _layer(module: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for pre in prefixes:
            if (module == pre or module.startswith(pre + ".")) and len(pre) > best:
                best, rank = len(pre), i
    if rank is None:
        raise AssertionError(f"{module} is in no layer of tests/test_layering.py: add it to LAYERS")
    return rank


def _imports(module: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every nnhal import."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "nnhal"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.split(".")[0] != "nnhal":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else (base, a.name, node.lineno))
    return out


def test_every_module_has_a_layer():
    for m in MODULES:
        _layer(m)


def test_imports_point_down():
    bad = []
    for m, path in sorted(MODULES.items()):
        for target, _, line in _imports(m, path):
            if target not in MODULES:
                continue  # e.g. a name of a module not present in this checkout
            up = _layer(target) > _layer(m)
            peers = any((_under(m, a) and _under(target, b)) or (_under(m, b) and _under(target, a))
                        for a, b in PEERS_APART)
            if (up or peers) and (m, target) not in ALLOWED_UPWARD:
                bad.append(f"{path.relative_to(SRC)}:{line}: {m} ({LAYERS[_layer(m)][0]}) imports "
                           f"{target} ({LAYERS[_layer(target)][0]})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _package_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for m, path in MODULES.items():
        for target, _, _ in _imports(m, path):
            a, b = _package(m), _package(target)
            if a != b:
                edges[a].add(b)
    return edges


def test_no_cycle_between_packages():
    """Counting every import (inside functions too), the top-level packages form a DAG."""
    edges = _package_graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(n: str) -> None:  # NOTE: a few dozen packages: recursion is fine here
        state[n] = 1
        stack.append(n)
        for t in sorted(edges.get(n, ())):
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n)
    assert not cycles, "import cycles between top-level packages:\n" + "\n".join(cycles)


def test_aliases_are_for_users_only():
    aliases = LAYERS[-1][1]
    bad = [f"{m} imports {t}" for m, path in MODULES.items() for t, _, _ in _imports(m, path)
           if any(_under(t, a) for a in aliases) and not any(_under(m, a) for a in aliases)]
    assert not bad, "nnhal imports its public aliases instead of the modules:\n" + "\n".join(bad)


def test_front_end_builds_no_driver():
    """The front end is a library: it never imports a backend (drivers plug in, as SampleDriverFull includes
    SampleDriver.h)."""
    bad = [f"{m} imports {t}" for m, path in MODULES.items() if _under(m, "nnhal.driver")
           for t, _, _ in _imports(m, path) if _under(t, "nnhal.drivers")]
    assert not bad, "\n".join(bad)


def test_no_private_names_across_modules():
    bad = []
    for m, path in sorted(MODULES.items()):
        for target, name, line in _imports(m, path):
            privates = [n for n in (name, target.rpartition(".")[2]) if n and n.startswith("_")
                        and not n.startswith("__")]
            if privates and target != m:
                bad.append(f"{path.relative_to(SRC)}:{line}: {m} imports {target}.{name or ''}")
        # module._private attribute use of an imported nnhal module
        aliases = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nnhal"):
                for a in node.names:
                    if f"{node.module}.{a.name}" in MODULES:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("nnhal") and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{path.relative_to(SRC)}:{node.lineno}: {m} uses {aliases[node.value.id]}.{node.attr}")
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


@pytest.mark.parametrize("source,target,ok", [
    ("nnhal.ops.control_flow", "nnhal.engine.executor", False),
    ("nnhal.engine.executor", "nnhal.ops.base", True),
    ("nnhal.drivers.sample", "nnhal.driver.backend", True),
    ("nnhal.driver.device", "nnhal.drivers.sample", False),
    ("nnhal.hal.types", "nnhal.platform.memory", False),
    ("nnhal.cli.app", "nnhal.conformance.runner", True),
    ("nnhal.runtime.burst", "nnhal.service.client", True),
    ("nnhal.service.server", "nnhal.runtime", False),
])
def test_layer_table_orders(source, target, ok):
    assert (_layer(target) <= _layer(source)) == ok
