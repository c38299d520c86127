"""``python -m nnhal.tools.vts_bench --sections``: a whole in-process VTS run timed section by section (the
figures of issue 28), on this tree and others alternating."""

from __future__ import annotations

from pathlib import Path

from nnhal.tools import vts_bench

SRC = str(Path(vts_bench.__file__).resolve().parents[2])


def test_one_run_is_timed_section_by_section() -> None:
    r = vts_bench.run_sections(SRC, [*vts_bench.DEFAULT_RUN, "--section", "basic,caching"])
    assert r["code"] == 0 and r["failed"] == 0 and r["cases"] > 0
    assert set(r["sections"]) == {"basic", "caching"}
    assert all(w >= 0 and c >= 0 for w, c in r["sections"].values())
    assert r["wall"] >= sum(w for w, _ in r["sections"].values()) and r["user"] + r["sys"] > 0
    lines = vts_bench.sections_report({SRC: [r, r], "other": [r]})
    assert lines[0].startswith(f"{SRC} run 1: {r['cases']} cases, 0 failed")
    table = lines[3:]
    assert table[1].split()[0] == "[1]" and [x.split()[0] for x in table[2:]] == ["basic", "caching", "(run)"]
    assert f"{r['wall']:.1f}" in table[-1]


def test_a_run_that_fails_says_so() -> None:
    r = vts_bench.run_sections(SRC, [*vts_bench.DEFAULT_RUN, "--section", "basic", "--device", "no-such-device"])
    assert r["code"] != 0 and r["cases"] == 0 and r["sections"] == {}
