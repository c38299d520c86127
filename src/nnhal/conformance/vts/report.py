"""Reports of ``nnhal vts``: the terminal tables (one per section, a row per
VTS test), JSON, JUnit XML and a self-contained HTML page, each echoing the
settings of the run.  The last line of the terminal report is the summary
tools read: ``N passed, N failed, N unsupported``."""

from __future__ import annotations

import html
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional, TextIO

import msgspec

from nnhal.conformance.report import PAGE_CSS, PAGE_JS, plain_message
from nnhal.conformance.vts.case import STATUSES, Case
from nnhal.conformance.vts.sections import DESCRIPTIONS, OPT_IN, PER_MODEL, SECTIONS


@dataclass
class Settings:
    device: str = ""
    hal: str = "hidl"
    sections: list[str] = field(default_factory=list)
    sample: Optional[int] = None
    models: int = 0
    ops: list[str] = field(default_factory=list)
    model_filter: str = ""
    runner: str = "jobs 1"
    version: str = ""
    vectors: list[str] = field(default_factory=list)
    interrupted: bool = False
    extra: list[tuple[str, str]] = field(default_factory=list)  # NOTE: a section's own settings (random)

    def lines(self) -> list[tuple[str, str]]:
        out = [("nnhal", self.version), ("device", self.device), ("hal", self.hal),
               ("sections", ", ".join(self.sections))]
        if any(s in PER_MODEL for s in self.sections):  # NOTE: the vector models' settings, where they are used
            out += [("mutations", "all (full sweep)" if self.sample is None else f"{self.sample} per model (sample)"),
                    ("models", f"{self.models}" + (f" (operations {', '.join(self.ops)})" if self.ops else "")
                     + (f" (name contains {self.model_filter!r})" if self.model_filter else "")),
                    ("vectors", ", ".join(self.vectors))]
        out.append(("runner", self.runner))
        out += self.extra
        if self.interrupted:
            out.append(("interrupted", "yes: the cases of the units that ended"))
        return out


@dataclass
class Report:
    cases: list[Case] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        c = dict.fromkeys(STATUSES, 0)
        for x in self.cases:
            c[x.status] += 1
        return c


def by_test(cases: Iterable[Case]) -> dict[str, list[tuple[str, dict[str, int]]]]:
    """Per section (in run order), per VTS test (in order of first case): the counts."""
    rows: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for c in cases:
        row = rows[c.section].setdefault(c.test, dict.fromkeys(STATUSES, 0))
        row[c.status] += 1
    order = [s for s in SECTIONS + OPT_IN if s in rows] + [s for s in rows if s not in SECTIONS + OPT_IN]
    return {s: list(rows[s].items()) for s in order}


def summary_line(report: Report) -> str:
    c = report.counts()
    return f"{c['pass']} passed, {c['fail']} failed, {c['unsupported']} unsupported"


def unsupported_reasons(cases: Iterable[Case], top: int = 10) -> list[tuple[str, int, str]]:
    groups: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        if c.status == "unsupported":
            groups[f"{c.section}: {c.message.split(' -- ')[0][:120]}"].append(c)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [(reason, len(v), v[0].name) for reason, v in ranked[:top]]


def print_report(report: Report, settings: Settings, out: Optional[TextIO] = None, failures: int = 40) -> None:
    out = out or sys.stdout
    for k, v in settings.lines():
        out.write(f"{k + ':':12s} {v}\n")
    for section, rows in by_test(report.cases).items():
        c = {s: sum(r[s] for _, r in rows) for s in STATUSES}
        out.write(f"\n{section}: {DESCRIPTIONS.get(section, '')}\n")
        width = max(len(t) for t, _ in rows)
        out.write(f"  {'test':{width}s}  {'pass':>8s} {'fail':>7s} {'unsupp':>7s}\n")
        for test, r in rows:
            mark = "  <-" if r["fail"] else ""
            out.write(f"  {test:{width}s}  {r['pass']:8d} {r['fail']:7d} {r['unsupported']:7d}{mark}\n")
        out.write(f"  {'(section)':{width}s}  {c['pass']:8d} {c['fail']:7d} {c['unsupported']:7d}\n")
    bad = [c for c in report.cases if c.status == "fail"]
    if bad:
        out.write(f"\nfailures ({len(bad)} cases):\n")
        for c in bad[:failures]:
            msg = plain_message(c.message).replace("\n", "\n    ")  # NOTE: a finding's lines (random) indented
            out.write(f"  {c.name}: expected {c.expected}, got {c.actual}: {msg}\n")
        if len(bad) > failures:
            out.write(f"  ... and {len(bad) - failures} more (see --json / --html)\n")
    reasons = unsupported_reasons(report.cases)
    if reasons:
        out.write("\nunsupported (cases, the driver's reason):\n")
        for reason, n, example in reasons:
            out.write(f"  {n:7d}  {reason}   e.g. {example}\n")
    n = len(report.cases)
    out.write(f"\n{n} cases in {report.seconds:.1f} s ({n / report.seconds if report.seconds else 0:.0f} per second)"
              f"{' (interrupted)' if settings.interrupted else ''}\n")
    out.write(summary_line(report) + "\n")


_ENCODER = msgspec.json.Encoder()
_FIELDS = Case.__struct_fields__
_RANDOM_ONLY = ("operations", "reproducer")


def case_dict(c: Case) -> dict[str, Any]:
    """A case as the reports write it: its fields, without the worker's attachment, with the random
    section's ``operations`` and ``reproducer`` only where a reproducer was written."""
    d = {x: getattr(c, x) for x in _FIELDS if x != "attachment"}
    if not c.reproducer:
        for x in _RANDOM_ONLY:
            del d[x]
    return d


def write_json(report: Report, path: str, settings: Settings) -> None:
    """Settings, counts, the tables, then every case as an object (streamed: a full sweep has millions)."""
    head = {"settings": asdict(settings), "counts": report.counts(), "seconds": report.seconds,
            "sections": {s: {t: r for t, r in rows} for s, rows in by_test(report.cases).items()},
            "unsupported_reasons": [{"reason": r, "cases": n, "example": e}
                                    for r, n, e in unsupported_reasons(report.cases)]}
    with open(path, "w") as f:
        f.write(json.dumps(head, indent=1)[:-2] + ',\n "cases": [')
        for k, c in enumerate(report.cases):
            d = case_dict(c)
            d["name"] = c.name
            f.write(("\n  " if k == 0 else ",\n  ") + _ENCODER.encode(d).decode())
        f.write("\n ]\n}\n")


def write_junit(report: Report, path: str, settings: Settings) -> None:
    """One testsuite per section, one testcase per case (classname: the VTS test)."""
    c = report.counts()
    root = ET.Element("testsuites", name="nnhal vts", tests=str(len(report.cases)), failures=str(c["fail"]),
                      time=f"{report.seconds:.3f}")
    props = ET.SubElement(root, "properties")
    for k, v in settings.lines():
        ET.SubElement(props, "property", name=k, value=v)
    per: dict[str, list[Case]] = defaultdict(list)
    for x in report.cases:
        per[x.section].append(x)
    for section in [s for s in SECTIONS + OPT_IN if s in per] + [s for s in per if s not in SECTIONS + OPT_IN]:
        cases = per[section]
        n = {s: sum(x.status == s for x in cases) for s in STATUSES}
        suite = ET.SubElement(root, "testsuite", name=section, tests=str(len(cases)), failures=str(n["fail"]),
                              errors="0", skipped=str(n["unsupported"]), time=f"{sum(x.seconds for x in cases):.3f}")
        for x in cases:
            name = "/".join(p for p in (x.model, x.mutation) if p) or x.test
            case = ET.SubElement(suite, "testcase", classname=f"{section}.{x.test}", name=name,
                                 time=f"{x.seconds:.3f}")
            if x.status == "fail":
                msg = f"expected {x.expected}, got {x.actual}: {plain_message(x.message)}"
                ET.SubElement(case, "failure", message=msg[:500]).text = msg
            elif x.status == "unsupported":
                ET.SubElement(case, "skipped", message=f"unsupported: {plain_message(x.message)}"[:500])
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _table(tid: str, rows: list[tuple[str, dict[str, int]]]) -> str:
    body = []
    for test, r in rows:
        cls = "fail" if r["fail"] else ("unsupported" if r["unsupported"] else "ok")
        body.append(f"<tr class='{cls}'><td>{html.escape(test)}</td>" +
                    "".join(f"<td class='num'>{r[s]}</td>" for s in STATUSES) + "</tr>")
    head = "<th>test</th>" + "".join(f"<th class='num'>{s}</th>" for s in STATUSES)
    return f"<table id='{tid}' class='filterable'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _case_rows(cases: list[Case], limit: int) -> str:
    rows = "".join(f"<tr class='{c.status}'><td>{html.escape(c.section)}</td><td>{html.escape(c.test)}</td>"
                   f"<td>{html.escape(c.model)}</td><td>{html.escape(c.mutation)}</td>"
                   f"<td>{html.escape(c.expected)}</td><td>{html.escape(c.actual)}</td>"
                   f"<td><code>{html.escape(plain_message(c.message))}</code></td></tr>" for c in cases[:limit])
    more = f"<p>... and {len(cases) - limit} more (see the JSON report)</p>" if len(cases) > limit else ""
    return ("<table class='filterable'><thead><tr><th>section</th><th>test</th><th>model</th><th>mutation</th>"
            f"<th>expected</th><th>actual</th><th>message</th></tr></thead><tbody>{rows}</tbody></table>{more}")


def write_html(report: Report, path: str, settings: Settings, limit: int = 5000) -> None:
    """Settings, the summary, a sortable, filterable table per section, the
    failed cases and the unsupported ones (the first ``limit`` of each)."""
    c = report.counts()
    parts = ["<h1>nnhal vts</h1>"]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in settings.lines())
    parts.append(f"<h2>Settings</h2><table id='settings'>{rows}</table>")
    parts.append(f"<h2>Summary</h2><div class='sum' id='summary'><span>{len(report.cases)} cases</span>"
                 f"<span class='pass'>{c['pass']} passed</span><span class='failc'>{c['fail']} failed</span>"
                 f"<span>{c['unsupported']} unsupported</span></div><p>in {report.seconds:.1f} s</p>")
    parts.append("<p><label>Filter <input id='filter' type='search' oninput='filterRows()' "
                 "placeholder='test, model, mutation...'></label> <label><input id='failing' type='checkbox' "
                 "onchange='filterRows()'> failing only</label> (click a column to sort)</p>")
    for section, trows in by_test(report.cases).items():
        parts.append(f"<h2 id='section-{section}'>{html.escape(section)}</h2><p>"
                     f"{html.escape(DESCRIPTIONS.get(section, ''))}</p>" + _table(f"tests-{section}", trows))
    failed = [x for x in report.cases if x.status == "fail"]
    if failed:
        parts.append(f"<h2>Failures ({len(failed)} cases)</h2>" + _case_rows(failed, limit))
    unsupported = [x for x in report.cases if x.status == "unsupported"]
    if unsupported:
        parts.append(f"<h2>Unsupported ({len(unsupported)} cases)</h2>" + _case_rows(unsupported, limit))
    doc = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>nnhal vts</title>"
           f"<style>{PAGE_CSS}</style></head><body>{''.join(parts)}<script>{PAGE_JS}</script></body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)


def to_dicts(cases: Iterable[Case]) -> list[dict[str, Any]]:
    return [case_dict(c) for c in cases]
