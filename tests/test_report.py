"""The conformance reports: models counted under every operation they use and
by data type, the settings echoed, JUnit XML, the HTML page (rendered and
filtered in a real headless browser), and --jobs giving the same results."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nnhal.cli import app as cli
from nnhal.cli.conformance import Progress
from nnhal.conformance import report as rep
from nnhal.conformance.runner import CaseResult, Report
from tests.conftest import vectors_root

V = vectors_root()


def _report() -> Report:
    cases = []
    for mode in ("sync", "async"):
        cases.append(CaseResult("V1_2", "roi_nhwc", ["ROI_ALIGN", "CONCATENATION"], mode, "plain", "pass", dtype="float32"))
        cases.append(CaseResult("V1_0", "conv_q8", ["CONV_2D"], mode, "plain", "pass", dtype="quant8 asymm"))
        cases.append(CaseResult("V1_0", "conv_q8_signed", ["CONV_2D"], mode, "signed",
                                "fail" if mode == "async" else "pass",
                                "output 0: max error np.float64(0.5) > np.float32(1e-05)" if mode == "async" else "",
                                dtype="quant8 signed"))
        cases.append(CaseResult("V1_3", "hard_swish", ["HARD_SWISH"], mode, "plain", "unsupported",
                                "unsupported: HARD_SWISH", dtype="float16"))
    return Report(cases, 1.5)


SETTINGS = rep.Settings(device="sample-all", modes=["sync", "async"], variants=["plain", "signed"],
                        memory="ashmem", paths=["/v"], version="9.9")


def test_models_counted_under_every_operation() -> None:
    ops = dict(rep.by_operation(_report()))
    assert set(ops) == {"ROI_ALIGN", "CONCATENATION", "CONV_2D", "HARD_SWISH"}
    assert ops["ROI_ALIGN"]["pass"] == 1 and ops["CONCATENATION"]["pass"] == 1 and ops["ROI_ALIGN"]["runs"] == 2
    assert ops["CONV_2D"] == {"pass": 1, "fail": 1, "unsupported": 0, "skip": 0, "runs": 4}
    types = dict(rep.by_data_type(_report()))
    assert types["quant8 signed"]["fail"] == 1 and types["float16"]["unsupported"] == 1
    assert rep.model_counts(_report()) == {"pass": 2, "fail": 1, "unsupported": 1, "skip": 0}


def test_terminal_table() -> None:
    out = io.StringIO()
    rep.print_table(_report(), out, settings=SETTINGS)
    text = out.getvalue()
    assert "counting models" in text and "runs" in text
    assert re.search(r"^ROI_ALIGN\s+1\s+0\s+0\s+0\s+2$", text, re.M)
    assert re.search(r"^quant8 signed\s+0\s+1\s+0\s+0\s+2\s+<-$", text, re.M)
    for k in ("nnhal:", "9.9", "device:", "modes:", "sync, async", "memory:", "ashmem", "vectors:", "/v"):
        assert k in text
    assert "np.float64" not in text and "max error 0.5 > 1e-05" in text
    assert "models: 2 passed, 1 failed, 1 unsupported" in text
    assert "conformance: 5 passed, 1 failed, 2 unsupported" in text


def test_plain_message() -> None:
    assert rep.plain_message("np.float64(0.5) vs np.float32(-1e-05), np.int64(3), np.True_") == \
        "0.5 vs -1e-05, 3, np.True_"


def test_progress_plain_lines_have_an_eta() -> None:
    out = io.StringIO()
    p = Progress(3, enabled=True, fancy=False, stream=out)
    for k in range(3):
        p.step(k == 1, f"m{k}")
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("1/3 models, 0 failed") and "ETA" in lines[0]
    assert lines[-1].startswith("3/3 models, 1 failed") and lines[-1].endswith("ETA 0 s")


def test_junit_xml(tmp_path: Path) -> None:
    path = tmp_path / "j.xml"
    settings = rep.Settings(**{**SETTINGS.__dict__, "file_errors": ["/v/bad.json.gz: not a readable vector file"]})
    rep.write_junit(_report(), str(path), settings)
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "8" and root.get("failures") == "1"
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"V1_0", "V1_2", "V1_3", "vector files"}
    total = 0
    for name, s in suites.items():
        cases = s.findall("testcase")
        assert int(s.get("tests")) == len(cases)
        assert int(s.get("failures")) == sum(c.find("failure") is not None for c in cases)
        total += len(cases) if name != "vector files" else 0
        for c in cases:
            assert c.get("classname") and c.get("name")
    assert total == 8
    fail = root.find(".//testcase/failure")
    assert fail is not None and "np.float64" not in fail.get("message")
    assert root.find(".//testcase/skipped").get("message").startswith("unsupported")
    assert suites["vector files"].find("testcase/error") is not None
    assert {p.get("name") for p in root.find("properties")} >= {"device", "modes", "memory", "vectors"}


def test_html_sections(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    rep.write_html(_report(), str(path), SETTINGS)
    page = path.read_text()
    assert "np.float64" not in page and "max error 0.5 &gt; 1e-05" in page
    for section in ("Settings", "Summary", "Per operation", "Per data type", "Failures (1 models)", "Unsupported"):
        assert section in page
    assert "<script>" in page and "http" not in page.split("<body>")[1]  # NOTE: no network
    # every table has rows
    for table in re.findall(r"<table.*?</table>", page, re.S):
        assert "<td" in table
    ok = Report([c for c in _report().cases if c.status == "pass"], 1.0)
    rep.write_html(ok, str(path), SETTINGS)
    page = path.read_text()
    assert "Failures" not in page and "Unsupported (" not in page
    rep.write_html(Report([], 0.0), str(path), SETTINGS)
    page = path.read_text()
    assert "Per operation" not in page and all("<td" in t for t in re.findall(r"<table.*?</table>", page, re.S))


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no headless browser (Debian: apt-get install chromium; .ci/run installs it)")


def _dom(browser: str, url: str, tmp_path: Path) -> str:
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", "--dump-dom", url],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "<html" in r.stdout, r.stderr[-2000:]
    return r.stdout


def test_html_renders_and_filters_in_a_browser(tmp_path: Path) -> None:
    browser = _browser()
    path = tmp_path / "r.html"
    rep.write_html(_report(), str(path), SETTINGS)
    dom = _dom(browser, path.as_uri(), tmp_path)
    assert 'data-ready="1"' in dom  # NOTE: the script ran
    rows = re.findall(r"<tr class=\"(\w+)\"( style=\"display: none;\")?><td>([A-Z_0-9]+)</td>", dom)
    assert rows and not any(hidden for _, hidden, _ in rows)
    dom = _dom(browser, path.as_uri() + "#filter=roi_align", tmp_path)
    visible = {op for _, hidden, op in re.findall(r"<tr class=\"(\w+)\"( style=\"display: none;\")?>"
                                                  r"<td>([A-Z_0-9]+)</td>", dom) if not hidden}
    assert visible == {"ROI_ALIGN"}, visible


def test_jobs_give_the_same_results(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    files = [str(V / "V1_0" / "add.json.gz"), str(V / "V1_2" / "concat_zero_sized.json.gz"),
             str(V / "V1_3" / "while_infinite_loop.json.gz"), str(V / "V1_0" / "conv_quant8.json.gz")]
    runs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}.json"
        assert cli.main(["conformance", *files, "--mode", "sync", "--no-progress", "--jobs", jobs,
                         "--json", str(out)]) == 0
        doc = json.loads(out.read_text())
        assert doc["settings"]["jobs"] == int(jobs)
        runs[jobs] = doc
    capsys.readouterr()
    one, two = runs["1"], runs["2"]
    assert one["counts"] == two["counts"] and one["models"] == two["models"]
    assert one["operations"] == two["operations"] and one["data_types"] == two["data_types"]
    key = [(c["spec"], c["model"], c["mode"], c["variant"], c["status"]) for c in one["cases"]]
    assert key == [(c["spec"], c["model"], c["mode"], c["variant"], c["status"]) for c in two["cases"]]
    assert "ROI_ALIGN" in one["operations"] and one["counts"]["pass"] > 10


def test_compare_messages_print_numbers() -> None:
    import numpy as np

    from nnhal import hal
    from nnhal.conformance.compare import compare

    v = compare(np.array([1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32), hal.OperandType.TENSOR_FLOAT32,
                model_has_fp16=False, relaxed=False, name="x")
    assert not v.ok and "np." not in v.message and "got 2.0, expected 2.5" in v.message


def _coverage_report() -> Report:
    """Five vector models on a driver refusing some (reasons as the runner words them), plus a
    quant8-signed copy, which the coverage does not count."""
    why = "unsupported: CONV_2D -- CONV_2D: explicit padding [1, 2, 0, 0] is neither VALID nor TFLite's SAME"
    cases = [CaseResult("V1_2", "conv_a", ["CONV_2D"], "sync", "plain", "unsupported", why, dtype="float32"),
             CaseResult("V1_2", "conv_b", ["CONV_2D", "ADD"], "sync", "plain", "unsupported",
                        why.replace("[1, 2, 0, 0]", "[3, 3, 1, 1]"), dtype="quant8 asymm"),
             CaseResult("V1_3", "while_1", ["WHILE", "ADD"], "sync", "plain", "unsupported",
                        "unsupported: WHILE -- WHILE has no direct TFLite operator in the table", dtype="float32"),
             CaseResult("V1_0", "add", ["ADD"], "sync", "plain", "pass", dtype="float32"),
             CaseResult("V1_0", "add_q8", ["ADD"], "sync", "plain", "fail", "output 0: max error 2", dtype="quant8 asymm"),
             CaseResult("V1_0", "add_q8_signed", ["ADD"], "sync", "signed", "unsupported", "unsupported: ADD",
                        dtype="quant8 signed"),
             # NOTE: a vector expecting a failure "passes" when the device refuses it: still not supported
             CaseResult("V1_3", "while_loop", ["WHILE"], "sync", "plain", "pass",
                        "failed as expected at prepare (unsupported: WHILE -- WHILE has no direct TFLite operator in "
                        "the table)", dtype="float32")]
    return Report(cases, 1.0)


def test_operation_and_type_table_counts_unsupported() -> None:
    both = dict(rep.by_operation_and_type(_coverage_report()))
    assert both[("CONV_2D", "float32")]["unsupported"] == 1 and both[("CONV_2D", "quant8 asymm")]["unsupported"] == 1
    assert both[("ADD", "quant8 asymm")] == {"pass": 0, "fail": 1, "unsupported": 1, "skip": 0, "runs": 2}
    assert both[("ADD", "quant8 signed")]["unsupported"] == 1
    out = io.StringIO()
    rep.print_table(_coverage_report(), out)
    text = out.getvalue()
    assert re.search(r"^operation / data type\s+pass\s+fail\s+unsupp", text, re.M)
    assert re.search(r"^CONV_2D / quant8 asymm\s+0\s+0\s+1\s+0\s+1$", text, re.M)
    assert re.search(r"^ADD / quant8 asymm\s+0\s+1\s+1\s+0\s+2\s+<-$", text, re.M)


def test_closing_note_coverage_and_reasons() -> None:
    r = _coverage_report()
    assert rep.coverage(r) == (2, 6)  # NOTE: the signed copy is not a vector model
    assert rep.unsupported_reason("unsupported: A,B -- A: input 3 is 7.5") == "A: input N is N"
    assert rep.unsupported_reason("unsupported: HARD_SWISH") == "HARD_SWISH"
    groups = rep.unsupported_groups(r)
    assert groups[0] == ("CONV_2D: explicit padding [N, N, N, N] is neither VALID nor TFLite's SAME", 2, "conv_a")
    assert groups[1][:2] == ("WHILE has no direct TFLite operator in the table", 2)
    out = io.StringIO()
    rep.print_table(r, out)
    text = out.getvalue()
    assert "coverage: 2 / 6 models supported (33.3%" in text
    assert re.search(r"^\s+2  CONV_2D: explicit padding \[N, N, N, N\].*e\.g\. conv_a$", text, re.M)
    ok = io.StringIO()
    rep.print_table(Report([c for c in r.cases if c.status != "unsupported"], 1.0), ok)
    assert "coverage:" not in ok.getvalue()  # NOTE: no closing note when the device took everything
    assert rep.closing_note(Report([], 0.0)) == []


def test_json_and_html_carry_the_coverage(tmp_path: Path) -> None:
    r = _coverage_report()
    rep.write_json(r, str(tmp_path / "r.json"), SETTINGS)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["coverage"] == {"supported": 2, "models": 6}
    assert doc["unsupported_groups"][0]["models"] == 2
    row = next(x for x in doc["operations_and_types"] if (x["operation"], x["data_type"]) == ("CONV_2D", "float32"))
    assert row["unsupported"] == 1
    rep.write_html(r, str(tmp_path / "r.html"), SETTINGS)
    page = (tmp_path / "r.html").read_text()
    assert "2 / 6 models supported" in page and "id='unsupported-groups'" in page
    assert "Per operation and data type" in page


def test_litert_run_names_its_reasons(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A litert-cpu run of a file it partly refuses: the unsupported runs carry the driver's reason and
    the text report closes with the coverage and the groups."""
    from nnhal.drivers import litert

    if not litert.available():
        pytest.skip("ai-edge-litert is not installed")
    f = V / "V1_2" / "heatmap_max_keypoint.json.gz"
    assert cli.main(["conformance", str(f), str(V / "V1_0" / "add.json.gz"), "--device", "litert-cpu", "--mode",
                     "sync", "--no-progress", "--plain", "--jobs", "1", "--allow-unsupported",
                     "--json", str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["coverage"]["supported"] >= 1 and doc["coverage"]["models"] > doc["coverage"]["supported"]
    assert any(g["reason"].startswith("HEATMAP_MAX_KEYPOINT") and "TFLite" in g["reason"]
               for g in doc["unsupported_groups"])
    assert "coverage: " in text and "largest unsupported groups" in text
    assert re.search(r"^HEATMAP_MAX_KEYPOINT / float32\s+0\s+0\s+[1-9]", text, re.M)
