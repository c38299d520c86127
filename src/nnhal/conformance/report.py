"""Reports of a conformance run: the terminal table, JSON, HTML and JUnit XML.

Every report counts **models** (a vector model, or its quant8-signed copy, is
one model; it passes when all its runs pass, fails when one fails) under
**every operation it uses** (a model of CONV_2D and ADD counts in both rows)
and by the **data type** it tests (float32, relaxed, float16, quant8 asymm,
quant8 signed, ...), and also gives the number of runs (a model runs once per
executor and variant).  Each report echoes the settings of the run.
"""

from __future__ import annotations

import html
import json
import math
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional, TextIO

from nnhal.conformance.runner import CaseResult, Report

STATUSES = ("pass", "fail", "unsupported", "skip")


@dataclass
class Settings:
    """What the run was asked to do (echoed by every report)."""
    device: str = "sample-all"
    hal: str = "hidl"  # the interface the device was judged through (hidl: HAL 1.3; aidl: the stable AIDL)
    modes: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    memory: str = "ashmem"
    paths: list[str] = field(default_factory=list)
    version: str = ""
    jobs: int = 1
    file_errors: list[str] = field(default_factory=list)  # vector files that could not be read
    interrupted: bool = False  # Ctrl-C: the report holds what ran before it
    started: str = ""  # the run's start, local time with its UTC offset (ISO 8601); see run_metadata()
    host: str = ""  # the machine: host name, OS, Python, cores
    command: str = ""  # the command line

    def lines(self) -> list[tuple[str, str]]:
        out = [("nnhal", self.version), ("device", self.device), ("hal", self.hal), ("modes", ", ".join(self.modes)),
               ("variants", ", ".join(self.variants)), ("memory", self.memory),
               ("vectors", ", ".join(self.paths)), ("jobs", str(self.jobs))]
        out += [(k, v) for k, v in (("started", self.started), ("host", self.host), ("command", self.command)) if v]
        if self.interrupted:
            out.append(("interrupted", "yes: partial results of the models that ran"))
        return out


def run_metadata() -> dict[str, str]:
    """``started``, ``host`` and ``command`` for :class:`Settings`: when and where a run ran."""
    import datetime
    import os
    import platform
    import shlex

    now = datetime.datetime.now().astimezone()
    host = (f"{platform.node()} ({platform.system()} {platform.release()}, {platform.machine()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()})")
    return {"started": now.isoformat(timespec="seconds"), "host": host,
            "command": " ".join(shlex.quote(a) for a in ["nnhal", *sys.argv[1:]])}


def print_settings(settings: Settings, out: Optional[TextIO] = None) -> None:
    """The settings, one per line (printed before a run starts; :func:`print_table` with ``echo_settings``
    prints them again with the results)."""
    out = out or sys.stdout
    for k, v in settings.lines():
        out.write(f"{k + ':':10s} {v}\n")
    for e in settings.file_errors:
        out.write(f"error: {e}\n")
    out.write("\n")
    out.flush()


@dataclass
class ModelResult:
    """One model's runs and its verdict."""
    spec: str
    model: str
    ops: list[str]
    dtype: str
    runs: list[CaseResult]

    @property
    def status(self) -> str:
        got = {r.status for r in self.runs}
        for s in ("fail", "unsupported", "pass"):
            if s in got:
                return s
        return "skip"


def models(report: Report) -> list[ModelResult]:
    """The runs of ``report`` grouped per model, in the order they ran."""
    by: dict[tuple[str, str], ModelResult] = {}
    for c in report.cases:
        m = by.get((c.spec, c.model))
        if m is None:
            m = by[(c.spec, c.model)] = ModelResult(c.spec, c.model, list(c.ops), c.dtype or "?", [])
        m.runs.append(c)
    return list(by.values())


def _empty() -> dict[str, int]:
    return {"pass": 0, "fail": 0, "unsupported": 0, "skip": 0, "runs": 0}


def _rows(ms: Iterable[ModelResult], keys: Any) -> list[tuple[str, dict[str, int]]]:
    rows: dict[str, dict[str, int]] = defaultdict(_empty)
    for m in ms:
        for k in keys(m):
            rows[k][m.status] += 1
            rows[k]["runs"] += len(m.runs)
    return sorted(rows.items())


def by_operation(report: Report) -> list[tuple[str, dict[str, int]]]:
    """Models per operation: a model counts under every operation it uses."""
    return _rows(models(report), lambda m: m.ops or ["(none)"])


def by_data_type(report: Report) -> list[tuple[str, dict[str, int]]]:
    """Models per data type."""
    return _rows(models(report), lambda m: [m.dtype])


def by_operation_and_type(report: Report) -> list[tuple[tuple[str, str], dict[str, int]]]:
    """Models per (operation, data type): what a driver supports of each operation, type by type."""
    rows: dict[tuple[str, str], dict[str, int]] = defaultdict(_empty)
    for m in models(report):
        for op in m.ops or ["(none)"]:
            rows[(op, m.dtype)][m.status] += 1
            rows[(op, m.dtype)]["runs"] += len(m.runs)
    return sorted(rows.items())


_EXPECTED_REFUSAL = "failed as expected at prepare (unsupported"


def refusal(m: ModelResult) -> str:
    """The device's refusal of ``m`` ("" when it took it): an unsupported run's message, or a vector
    that expects a failure and "passed" because the device refused it at prepare."""
    for r in m.runs:
        if r.status == "unsupported":
            return r.message
    if m.runs and all(r.status == "pass" and r.message.startswith(_EXPECTED_REFUSAL) for r in m.runs):
        return m.runs[0].message[len("failed as expected at prepare ("):].rstrip(")")
    return ""


def coverage(report: Report) -> tuple[int, int]:
    """(models the device supports, models) of the run: a model is supported when it was prepared
    (it passed or failed), not when the device refused it (an expected-failure vector the device
    refused counts as refused); the quant8-signed copies the runner adds are not counted (the
    vector files' own models only)."""
    ms = [m for m in models(report) if not all("signed" in r.variant for r in m.runs)]
    return sum(m.status in ("pass", "fail") and not refusal(m) for m in ms), len(ms)


def unsupported_reason(message: str) -> str:
    """The group an unsupported run's message falls in: the driver's reason for its first
    refused operation (numbers replaced by N, so one reason groups every operand index and
    shape), else the refused operations."""
    msg = plain_message(message)
    if msg.startswith("unsupported: "):
        msg = msg[len("unsupported: "):]
    names, _, why = msg.partition(" -- ")
    if not why:
        return names
    why = re.sub(r"exact for \[.*\]", "exact for (listed types)", why)
    return re.sub(r"(?<![A-Za-z_\d])-?\d+(\.\d+)?(?![A-Za-z_\d])", "N", why)


def unsupported_groups(report: Report, top: int = 10) -> list[tuple[str, int, str]]:
    """The largest groups of models the device refused (signed copies not counted) by
    :func:`unsupported_reason`: (reason, models, an example model), largest first."""
    groups: dict[str, list[str]] = defaultdict(list)
    for m in models(report):
        why = refusal(m)
        if not why or all("signed" in r.variant for r in m.runs):
            continue
        groups[unsupported_reason(why)].append(m.model)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [(k, len(v), v[0]) for k, v in ranked[:top]]


def closing_note(report: Report, top: int = 10) -> list[str]:
    """The coverage and the reasons for the largest unsupported groups, as lines of text."""
    supported, total = coverage(report)
    if not total:
        return []
    out = [f"coverage: {supported} / {total} models supported ({100 * supported / total:.1f}%; "
           f"quant8 signed copies not counted)"]
    groups = unsupported_groups(report, top)
    if groups:
        out.append("largest unsupported groups (models, the driver's reason for the first refused operation):")
        out += [f"  {n:5d}  {reason}   e.g. {example}" for reason, n, example in groups]
    return out


def model_counts(report: Report) -> dict[str, int]:
    c = {s: 0 for s in STATUSES}
    for m in models(report):
        c[m.status] += 1
    return c


def plain_message(msg: str) -> str:
    """A message with numpy scalars' reprs (``np.float64(0.5)``) printed as numbers."""

    return re.sub(r"np\.(?:float|int|uint|bool_?)\d*\(([^()]*)\)", r"\1", msg)


HEADER = ("counting models (a model counts under every operation it uses; it passes when all its runs pass); "
          "runs = executions of the models")


def _table_text(title: str, rows: list[tuple[str, dict[str, int]]]) -> list[str]:
    width = max([len(title)] + [len(k) for k, _ in rows])
    out = [f"{title:{width}s}  {'pass':>6s} {'fail':>6s} {'unsupp':>6s} {'skip':>6s} {'runs':>7s}"]
    for k, c in rows:
        mark = "  <-" if c["fail"] else ""
        out.append(f"{k:{width}s}  {c['pass']:6d} {c['fail']:6d} {c['unsupported']:6d} {c['skip']:6d} "
                   f"{c['runs']:7d}{mark}")
    return out


def print_table(report: Report, out: Optional[TextIO] = None, failures: int = 40,
                settings: Optional[Settings] = None, rich_console: Any = None, echo_settings: bool = True) -> None:
    """The terminal report (on ``out``, default stdout): settings (unless ``echo_settings`` is false:
    printed before the run by :func:`print_settings`), models per operation and per data type, the
    first failures, and the summary lines.
    With ``rich_console`` (a ``rich.console.Console``) the tables are drawn with rich."""
    out = out or sys.stdout
    if settings is not None and echo_settings:
        print_settings(settings, out)
    elif settings is not None and settings.file_errors:
        for e in settings.file_errors:
            out.write(f"error: {e}\n")
    ops, types = by_operation(report), by_data_type(report)
    both = [(f"{op} / {dt}", c) for (op, dt), c in by_operation_and_type(report)]
    if rich_console is not None:
        _print_rich(rich_console, ops, types, both)
    else:
        out.write(HEADER + "\n")
        out.write("\n".join(_table_text("operation", ops)) + "\n\n")
        out.write("\n".join(_table_text("data type", types)) + "\n\n")
        out.write("\n".join(_table_text("operation / data type", both)) + "\n")
    bad = [c for c in report.cases if c.status == "fail"]
    if bad:
        out.write(f"\nfailures ({len(bad)} runs):\n")
        for c in bad[:failures]:
            out.write(f"  {c.spec} {c.model} [{c.mode}/{c.variant}]: {plain_message(c.message)}\n")
        if len(bad) > failures:
            out.write(f"  ... and {len(bad) - failures} more (see --json / --html)\n")
    n, mc = report.counts(), model_counts(report)
    n_models = len(models(report))
    coupled = len({(c.spec, c.model) for c in report.cases if "signed" in c.variant})
    out.write(f"\n{n_models} models ({coupled} of them quant8 signed-coupled copies), {len(report.cases)} runs "
              f"in {report.seconds:.1f} s\n")
    out.write(f"models: {mc['pass']} passed, {mc['fail']} failed, {mc['unsupported']} unsupported, "
              f"{mc['skip']} skipped\n")
    skipped = ""
    if n["skip"]:  # NOTE: runs that do not apply (e.g. a burst cannot carry device memory), with the reasons
        reasons = sorted({c.message for c in report.cases if c.status == "skip"})
        skipped = f", {n['skip']} skipped ({'; '.join(reasons)[:200]})"
    errors = len(settings.file_errors) if settings is not None else 0
    errs = f", {errors} unreadable vector files" if errors else ""
    out.write(f"conformance: {n['pass']} passed, {n['fail']} failed, {n['unsupported']} unsupported{skipped}{errs}"
              f"{' (interrupted)' if settings is not None and settings.interrupted else ''}\n")
    if mc["unsupported"]:
        out.write("\n" + "\n".join(closing_note(report)) + "\n")


def _print_rich(console: Any, ops: list, types: list, both: list) -> None:
    from rich.table import Table

    for title, rows in (("operation", ops), ("data type", types), ("operation / data type", both)):
        t = Table(title=f"models per {title}", caption=HEADER if title == "operation / data type" else None)
        t.add_column(title)
        for col in ("pass", "fail", "unsupp", "skip", "runs"):
            t.add_column(col, justify="right")
        for k, c in rows:
            style = "red" if c["fail"] else ("yellow" if c["unsupported"] else None)
            t.add_row(k, str(c["pass"]), str(c["fail"]), str(c["unsupported"]), str(c["skip"]), str(c["runs"]),
                      style=style)
        console.print(t)


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def write_json(report: Report, path: str, settings: Optional[Settings] = None) -> None:
    cases = []
    for c in report.cases:
        d = asdict(c)
        d["message"] = plain_message(c.message)
        d["max_error"] = _json_safe(c.max_error)
        cases.append(d)
    doc = {"settings": asdict(settings) if settings else None, "counts": report.counts(),
           "models": model_counts(report), "seconds": report.seconds,
           "operations": dict(by_operation(report)), "data_types": dict(by_data_type(report)),
           "operations_and_types": [{"operation": op, "data_type": dt, **c}
                                    for (op, dt), c in by_operation_and_type(report)],
           "coverage": dict(zip(("supported", "models"), coverage(report))),
           "unsupported_groups": [{"reason": r, "models": n, "example": e} for r, n, e in unsupported_groups(report)],
           "cases": cases}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def write_junit(report: Report, path: str, settings: Optional[Settings] = None) -> None:
    """JUnit XML for CI systems: one testsuite per vector spec, one testcase per run."""
    suites = ET.Element("testsuites", name="nnhal conformance", tests=str(len(report.cases)),
                        failures=str(report.counts()["fail"]), time=f"{report.seconds:.3f}")
    if settings is not None:
        props = ET.SubElement(suites, "properties")
        for k, v in settings.lines():
            ET.SubElement(props, "property", name=k, value=v)
    by_spec: dict[str, list[CaseResult]] = defaultdict(list)
    for c in report.cases:
        by_spec[c.spec].append(c)
    for spec, cases in sorted(by_spec.items()):
        n = {s: sum(c.status == s for c in cases) for s in STATUSES}
        suite = ET.SubElement(suites, "testsuite", name=spec, tests=str(len(cases)), failures=str(n["fail"]),
                              errors="0", skipped=str(n["skip"] + n["unsupported"]),
                              time=f"{sum(c.seconds for c in cases):.3f}")
        for c in cases:
            case = ET.SubElement(suite, "testcase", classname=f"{spec}.{c.model}", name=f"{c.mode}/{c.variant}",
                                 time=f"{c.seconds:.3f}")
            if c.status == "fail":
                ET.SubElement(case, "failure", message=plain_message(c.message)[:500]).text = plain_message(c.message)
            elif c.status == "unsupported":  # NOTE: the runner's message starts "unsupported: OPS -- reason"
                ET.SubElement(case, "skipped", message=f"{plain_message(c.message)} [{c.dtype}]"[:500])
            elif c.status == "skip":
                ET.SubElement(case, "skipped", message=f"skip: {plain_message(c.message)}"[:500])
    if settings is not None and settings.file_errors:
        suite = ET.SubElement(suites, "testsuite", name="vector files", tests=str(len(settings.file_errors)),
                              failures="0", errors=str(len(settings.file_errors)))
        for e in settings.file_errors:
            ET.SubElement(ET.SubElement(suite, "testcase", classname="vectors", name=e.split(":")[0]), "error",
                          message=e)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


# --------------------------------------------------------------------------
# HTML

PAGE_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px}
th{background:#eee;cursor:pointer;user-select:none}th.num,td.num{text-align:right}
tr.fail td{background:#fdd}tr.unsupported td{background:#ffd}
.sum span{display:inline-block;margin-right:1.5em;font-size:1.2em}.pass{color:#070}.failc{color:#b00}
details{margin:.3em 0}summary{cursor:pointer}code{white-space:pre-wrap}
details.model.fail>summary{color:#b00}details.model.unsupported>summary{color:#870}
.status{display:inline-block;min-width:7em;font-weight:600}"""

PAGE_JS = """function sortBy(th){const t=th.closest('table'),b=t.tBodies[0],i=[...th.parentNode.children].indexOf(th);
const num=th.classList.contains('num'),dir=th.dataset.dir==='a'?-1:1;th.dataset.dir=dir===1?'a':'d';
[...b.rows].sort((x,y)=>{const p=x.cells[i].textContent,q=y.cells[i].textContent;
return dir*(num?(parseFloat(p)-parseFloat(q)):p.localeCompare(q));}).forEach(r=>b.appendChild(r));}
function filterRows(){const q=document.getElementById('filter').value.toLowerCase(),
only=document.getElementById('failing').checked;
document.querySelectorAll('table.filterable tbody tr').forEach(r=>{
const ok=r.textContent.toLowerCase().includes(q)&&(!only||r.classList.contains('fail'));
r.style.display=ok?'':'none';});
document.querySelectorAll('details.model').forEach(d=>{
const ok=d.textContent.toLowerCase().includes(q)&&(!only||d.classList.contains('fail'));
d.style.display=ok?'':'none';});
const n=document.getElementById('shown');if(n){n.textContent=[...document.querySelectorAll('#all-models details.model')]
.filter(d=>d.style.display!=='none').length;}}
document.querySelectorAll('th').forEach(th=>th.addEventListener('click',()=>sortBy(th)));
const f=document.getElementById('filter');
if(f){const h=decodeURIComponent(location.hash||'');if(h.startsWith('#filter=')){f.value=h.slice(8);}
f.addEventListener('change',()=>history.replaceState(null,'','#filter='+encodeURIComponent(f.value)));
filterRows();document.body.dataset.ready='1';}"""


def _html_table(tid: str, head: list[str], rows: list[tuple[str, list[Any], dict[str, int]]]) -> str:
    cols = "".join(f"<th>{html.escape(h)}</th>" for h in head) + \
        "".join(f"<th class='num'>{h}</th>" for h in ("pass", "fail", "unsupported", "skip", "runs"))
    body = []
    for cls, keys, c in rows:
        cells = "".join(f"<td>{html.escape(str(k))}</td>" for k in keys)
        cells += "".join(f"<td class='num'>{c[s]}</td>" for s in ("pass", "fail", "unsupported", "skip", "runs"))
        body.append(f"<tr class='{cls}'>{cells}</tr>")
    return f"<table id='{tid}' class='filterable'><thead><tr>{cols}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _cls(c: dict[str, int]) -> str:
    return "fail" if c["fail"] else ("unsupported" if c["unsupported"] else "ok")


def _all_models_html(report: Report) -> str:
    """Every model, collapsed, with its status, data type, operations and duration; opened, each run
    with its mode, variant, status, duration and message (the filter box and "failing only" apply)."""
    items = []
    for m in models(report):
        secs = sum(r.seconds for r in m.runs)
        runs = "".join(f"<tr class='{r.status}'><td>{html.escape(r.mode)}</td><td>{html.escape(r.variant)}</td>"
                       f"<td>{r.status}</td><td class='num'>{r.seconds * 1e3:.1f}</td>"
                       f"<td><code>{html.escape(plain_message(r.message))}</code></td></tr>" for r in m.runs)
        items.append(f"<details class='model {m.status}'><summary><span class='status'>{m.status.upper()}</span> "
                     f"{html.escape(m.spec)} / {html.escape(m.model)} ({html.escape(', '.join(m.ops))}; "
                     f"{html.escape(m.dtype)}) - {len(m.runs)} runs, {secs * 1e3:.1f} ms</summary>"
                     f"<table><thead><tr><th>mode</th><th>variant</th><th>status</th><th class='num'>ms</th>"
                     f"<th>message</th></tr></thead><tbody>{runs}</tbody></table></details>")
    n = len(items)
    return (f"<h2>Models and runs ({n} models, <span id='shown'>{n}</span> shown)</h2>"
            f"<div id='all-models'>{''.join(items)}</div>")


def write_html(report: Report, path: str, settings: Optional[Settings] = None) -> None:
    """A self-contained page (no network): settings, summary, sortable and
    filterable tables per operation, per data type and per both, and the
    failures grouped per model with every run's message.  Empty sections are left out.
    ``report.html#filter=TEXT`` opens it filtered (the filter box keeps the address up to date)."""
    n, mc = report.counts(), model_counts(report)
    parts = ["<h1>nnhal conformance</h1>"]
    if settings is not None:
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in settings.lines())
        parts.append(f"<h2>Settings</h2><table id='settings'>{rows}</table>")
        if settings.file_errors:
            items = "".join(f"<li><code>{html.escape(e)}</code></li>" for e in settings.file_errors)
            parts.append(f"<h2>Unreadable vector files</h2><ul>{items}</ul>")
    parts.append(
        f"<h2>Summary</h2><div class='sum' id='summary'><span>{len(models(report))} models</span>"
        f"<span class='pass'>{mc['pass']} passed</span><span class='failc'>{mc['fail']} failed</span>"
        f"<span>{mc['unsupported']} unsupported</span><span>{mc['skip']} skipped</span></div>"
        f"<p>{len(report.cases)} runs: {n['pass']} passed, {n['fail']} failed, {n['unsupported']} unsupported, "
        f"{n['skip']} skipped, in {report.seconds:.1f} s. {html.escape(HEADER)}.</p>")
    if report.cases:
        parts.append("<p><label>Filter <input id='filter' type='search' oninput='filterRows()' "
                     "placeholder='operation, type, model...'></label> <label><input id='failing' type='checkbox' "
                     "onchange='filterRows()'> failing only</label> (click a column to sort)</p>")
        parts.append("<h2>Per operation</h2>" + _html_table(
            "ops", ["operation"], [(_cls(c), [k], c) for k, c in by_operation(report)]))
        parts.append("<h2>Per data type</h2>" + _html_table(
            "types", ["data type"], [(_cls(c), [k], c) for k, c in by_data_type(report)]))
        parts.append("<h2>Per operation and data type</h2>" + _html_table(
            "optypes", ["operation", "data type"], [(_cls(c), list(k), c) for k, c in by_operation_and_type(report)]))
    failing = [m for m in models(report) if m.status == "fail"]
    if failing:
        items = []
        for m in failing:
            runs = "".join(f"<tr class='{r.status}'><td>{html.escape(r.mode)}</td><td>{html.escape(r.variant)}</td>"
                           f"<td>{r.status}</td><td><code>{html.escape(plain_message(r.message))}</code></td></tr>"
                           for r in m.runs)
            n_fail = sum(r.status == "fail" for r in m.runs)
            items.append(f"<details class='model fail' open><summary>{html.escape(m.spec)} / {html.escape(m.model)} "
                         f"({html.escape(', '.join(m.ops))}; {html.escape(m.dtype)}): {n_fail} of {len(m.runs)} "
                         f"runs failed</summary><table><thead><tr><th>mode</th><th>variant</th><th>status</th>"
                         f"<th>message</th></tr></thead><tbody>{runs}</tbody></table></details>")
        parts.append(f"<h2>Failures ({len(failing)} models)</h2>" + "".join(items))
    unsupported = [m for m in models(report) if m.status == "unsupported"]
    if unsupported:
        supported, total = coverage(report)
        rows = "".join(f"<tr><td class='num'>{n}</td><td>{html.escape(r)}</td><td>{html.escape(e)}</td></tr>"
                       for r, n, e in unsupported_groups(report))
        parts.append(f"<h2>Coverage</h2><p id='coverage'>{supported} / {total} models supported "
                     f"({100 * supported / max(total, 1):.1f}%; quant8 signed copies not counted)</p>"
                     f"<table id='unsupported-groups'><thead><tr><th class='num'>models</th><th>reason (the first "
                     f"refused operation's)</th><th>e.g.</th></tr></thead><tbody>{rows}</tbody></table>")
        items = "".join(f"<li>{html.escape(m.spec)} / {html.escape(m.model)} [{html.escape(m.dtype)}]: "
                        f"{html.escape(plain_message(m.runs[0].message))}</li>" for m in unsupported)
        parts.append(f"<h2>Unsupported ({len(unsupported)} models)</h2><ul>{items}</ul>")
    if report.cases:
        parts.append(_all_models_html(report))
    doc = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>nnhal conformance</title>"
           f"<style>{PAGE_CSS}</style></head><body>{''.join(parts)}<script>{PAGE_JS}</script></body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)
