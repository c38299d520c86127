"""Dependencies point one way (../shared/STYLE.md, RULES.md "Layers point one
way"): every module's imports (module level and inside functions) are read with
ast and checked against the layer table below; no module imports another
module's private (_underscore) name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest layer first; a module may import its own layer or a lower one.  The
# longest matching prefix gives a module's layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("hal", ("nnhal.hal",)),
    # low-level beside hal: shared memory, sync fences, fast message queues, burst packets, polling
    ("low", ("nnhal.memory", "nnhal.fence", "nnhal.fmq", "nnhal.burst_packets", "nnhal.spin")),
    ("ops", ("nnhal.ops",)),
    # executor and validation are peers (checked below: neither imports the other)
    ("executor", ("nnhal.executor", "nnhal.validation")),
    # what driver backends build on: the backend interface, the compilation cache, the
    # capability measurement, and the TFLite flatbuffer tables/lowering the litert backend uses
    ("backend-support", ("nnhal.driver.backend", "nnhal.driver.cache", "nnhal.driver.capabilities",
                         "nnhal.tflite.lower", "nnhal.tflite.schema", "nnhal.tflite.table")),
    ("drivers", ("nnhal.drivers",)),  # the backends (sample, partial sample, litert-cpu)
    ("driver", ("nnhal.driver",)),  # the HAL front end every backend shares
    ("service", ("nnhal.service",)),
    ("public", ("nnhal", "nnhal.burst")),  # nnhal/__init__ (get_device, connect) and the burst client
    ("tools", ("nnhal.conformance", "nnhal.tflite", "nnhal.runtime", "nnhal.tools", "nnhal.demo",
               "nnhal.bench", "nnhal.bench_qos")),
    # TFLite models as Android's NNAPI delegate runs them (uses runtime and tflite; nothing below uses it)
    ("delegate", ("nnhal.delegate", "nnhal.tools.delegate_report")),
    ("cli", ("nnhal.cli", "nnhal.__main__")),
]

# pairs in one layer that must not import each other either way
PEERS_APART = [("nnhal.executor", "nnhal.validation")]

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
            peers = any({m, target} == {a, b} or (m.startswith(a + ".") and target == b) for a, b in PEERS_APART)
            if (up or peers) and (m, target) not in ALLOWED_UPWARD:
                bad.append(f"{path.relative_to(SRC)}:{line}: {m} ({LAYERS[_layer(m)][0]}) imports "
                           f"{target} ({LAYERS[_layer(target)][0]})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


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
    ("nnhal.ops.control_flow", "nnhal.executor", False),
    ("nnhal.executor", "nnhal.ops.base", True),
    ("nnhal.drivers.sample", "nnhal.driver.backend", True),
    ("nnhal.drivers.sample", "nnhal.driver.device", False),
    ("nnhal.hal.types", "nnhal.memory", False),
    ("nnhal.cli", "nnhal.conformance.runner", True),
])
def test_layer_table_orders(source, target, ok):
    assert (_layer(target) <= _layer(source)) == ok
