"""The conformance report as a CI test report (issue 21): every model and run listed (collapsed,
filterable), when / where / how long, unsupported entries with their data type, every report path
opened before the run, the settings printed before the progress display."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nnhal.cli import app as cli
from nnhal.conformance import report as rep
from nnhal.conformance.runner import CaseResult, Report
from tests.conftest import vectors_root

V = vectors_root()


def _report(all_pass: bool = False) -> Report:
    cases = [CaseResult("V1_0", "add", ["ADD"], m, "plain", "pass", seconds=0.002, dtype="float32")
             for m in ("sync", "async")]
    cases += [CaseResult("V1_0", "conv_q8", ["CONV_2D"], m, "plain", "pass", seconds=0.004, dtype="quant8 asymm")
              for m in ("sync", "async")]
    if not all_pass:
        cases.append(CaseResult("V1_3", "hard_swish", ["HARD_SWISH"], "sync", "plain", "unsupported",
                                "unsupported: HARD_SWISH", dtype="float16"))
        cases.append(CaseResult("V1_0", "mul", ["MUL"], "sync", "plain", "fail", "output 0: max error 0.5 > 1e-05",
                                seconds=0.003, dtype="float32"))
    return Report(cases, 0.5)


def _settings() -> rep.Settings:
    return rep.Settings(device="sample-all", modes=["sync", "async"], variants=["plain"], paths=["/v"],
                        version="9.9", **rep.run_metadata())


def test_all_pass_html_lists_every_model_and_run_with_metadata(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    rep.write_html(_report(all_pass=True), str(path), _settings())
    page = path.read_text()
    assert "Models and runs (2 models" in page
    models = re.findall(r"<details class='model (\w+)'>", page)
    assert models == ["pass", "pass"]  # collapsed: no open attribute
    assert "V1_0 / add (ADD; float32) - 2 runs, 4.0 ms" in page
    assert "<td class='num'>2.0</td>" in page  # each run's duration in ms
    for key in ("started", "host", "command"):
        assert f"<th>{key}</th>" in page
    assert re.search(r"<th>started</th><td>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", page)


def test_unsupported_entries_name_their_data_type(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    rep.write_html(_report(), str(path), _settings())
    page = path.read_text()
    assert "V1_3 / hard_swish [float16]: unsupported: HARD_SWISH" in page
    assert "<details class='model fail'><summary><span class='status'>FAIL</span> V1_0 / mul" in page
    assert "<details class='model fail' open>" in page  # NOTE: the failures section opens them


def test_unwritable_report_path_refused_before_the_run(capsys: pytest.CaptureFixture) -> None:
    for flag in ("--html", "--json", "--junit-xml"):
        rc = cli.main(["conformance", str(V / "V1_0" / "add.json.gz"), flag, "/proc/r.html", "--jobs", "1"])
        err = capsys.readouterr()
        assert rc == 2 and len(err.err.strip().splitlines()) == 1 and f"{flag} /proc/r.html" in err.err
        assert "conformance:" not in err.out  # NOTE: nothing ran


def test_settings_printed_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    vec = V / "V1_0" / "add.json.gz"
    if not vec.exists():
        pytest.skip("no vectors")
    html_path = tmp_path / "r.html"
    assert cli.main(["conformance", str(vec), "--mode", "sync", "--jobs", "1", "--html", str(html_path)]) == 0
    out = capsys.readouterr().out
    assert out.index("device:") < out.index("operation ") and out.count("device:") == 1
    assert "started:" in out and "host:" in out
    assert "Models and runs" in html_path.read_text()


def test_model_list_filters_in_a_browser(tmp_path: Path) -> None:
    import shutil
    import subprocess

    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                   None)
    if browser is None:
        pytest.skip("no headless browser (Debian: apt-get install chromium; .ci/run installs it)")
    path = tmp_path / "r.html"
    rep.write_html(_report(), str(path), _settings())
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", "--dump-dom",
                        path.as_uri() + "#filter=conv_q8"], capture_output=True, text=True, timeout=120)
    dom = r.stdout
    assert 'data-ready="1"' in dom, r.stderr[-2000:]
    shown = re.findall(r'<details class="model (\w+)"( style="display: none;")?><summary><span class="status">\w+'
                       r'</span> (\S+ / \S+)', dom)
    visible = {name for _, hidden, name in shown if not hidden}
    assert visible == {"V1_0 / conv_q8"} and len(shown) == 4  # every model listed, only the match shown
    assert "<span id=\"shown\">1</span>" in dom
