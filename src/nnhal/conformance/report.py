"""Reports of a conformance run: the per-operation table, JSON and HTML."""

from __future__ import annotations

import html
import json
import sys
from collections import defaultdict
from dataclasses import asdict
from typing import TextIO

from nnhal.conformance.runner import Report


def op_key(ops: list[str]) -> str:
    """Models are grouped by their operations; ADD alone is dropped from
    "all_inputs_as_internal" variants that only add it for plumbing."""
    rest = [o for o in ops if o != "ADD"]
    return ",".join(rest) if rest else "ADD"


def table(report: Report) -> list[tuple[str, dict[str, int]]]:
    rows: dict[str, dict[str, int]] = defaultdict(lambda: {"pass": 0, "fail": 0, "unsupported": 0, "skip": 0})
    for c in report.cases:
        rows[op_key(c.ops)][c.status] += 1
    return sorted(rows.items())


def print_table(report: Report, out: TextIO = sys.stdout, failures: int = 40) -> None:
    rows = table(report)
    width = max([9] + [len(k) for k, _ in rows])
    out.write(f"{'operation':{width}s}  {'pass':>6s} {'fail':>6s} {'unsupp':>6s}\n")
    for k, c in rows:
        mark = "" if not c["fail"] else "  <-"
        out.write(f"{k:{width}s}  {c['pass']:6d} {c['fail']:6d} {c['unsupported']:6d}{mark}\n")
    bad = [c for c in report.cases if c.status == "fail"]
    if bad:
        out.write(f"\nfailures ({len(bad)}):\n")
        for c in bad[:failures]:
            out.write(f"  {c.spec} {c.model} [{c.mode}/{c.variant}]: {c.message}\n")
        if len(bad) > failures:
            out.write(f"  ... and {len(bad) - failures} more (see --json)\n")
    unsupported = sorted({op_key(c.ops) for c in report.cases if c.status == "unsupported"})
    if unsupported:
        out.write(f"\nnot supported by the driver yet: {', '.join(unsupported)}\n")
    n = report.counts()
    models = len({(c.spec, c.model) for c in report.cases if "signed" not in c.variant})
    coupled = len({(c.spec, c.model) for c in report.cases if "signed" in c.variant})
    out.write(f"\n{models} vector models (+{coupled} quant8 signed-coupled copies), {len(report.cases)} runs "
              f"in {report.seconds:.1f} s\n")
    skipped = ""
    if n["skip"]:  # NOTE: runs that do not apply (e.g. a burst cannot carry device memory), with the reasons
        reasons = sorted({c.message for c in report.cases if c.status == "skip"})
        skipped = f", {n['skip']} skipped ({'; '.join(reasons)[:200]})"
    out.write(f"conformance: {n['pass']} passed, {n['fail']} failed, {n['unsupported']} unsupported{skipped}\n")


def write_json(report: Report, path: str) -> None:
    doc = {"counts": report.counts(), "seconds": report.seconds,
           "operations": {k: v for k, v in table(report)},
           "cases": [asdict(c) for c in report.cases]}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def write_html(report: Report, path: str) -> None:
    n = report.counts()
    rows = "".join(
        f"<tr class='{'bad' if c['fail'] else 'ok'}'><td>{html.escape(k)}</td><td>{c['pass']}</td>"
        f"<td>{c['fail']}</td><td>{c['unsupported']}</td></tr>" for k, c in table(report))
    fails = "".join(
        f"<tr><td>{html.escape(c.spec)}</td><td>{html.escape(c.model)}</td><td>{c.mode}/{c.variant}</td>"
        f"<td>{html.escape(c.message)}</td></tr>" for c in report.cases if c.status == "fail")
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>nnhal conformance</title>
<style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px}}
tr.bad td{{background:#fdd}}</style></head><body>
<h1>nnhal conformance</h1><p>{n['pass']} passed, {n['fail']} failed, {n['unsupported']} unsupported
in {report.seconds:.1f} s</p>
<table><tr><th>operations</th><th>pass</th><th>fail</th><th>unsupported</th></tr>{rows}</table>
<h2>Failures</h2><table><tr><th>spec</th><th>model</th><th>run</th><th>message</th></tr>{fails}</table>
</body></html>"""
    with open(path, "w") as f:
        f.write(doc)
