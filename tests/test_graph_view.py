"""``nnhal graph`` against Netron (issue 21): Graphviz's layered layout (edges routed around the
nodes), named parameters, tensor names on edges, named inputs and outputs, the interactive page
checked in headless Chromium (renders, every operation present, search, details with the device's
reason), partitions as coloured groups, the format from the extension."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nnhal.cli import app as cli

MODELS = Path(os.environ.get("NNHAL_MODELS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "models")
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="no Graphviz (apt-get install graphviz; "
                                                                  ".ci/run installs it)")


def model_path(name: str) -> Path:
    p = MODELS / f"{name}.tflite"
    if not p.exists():
        pytest.skip(f"{p} is missing (set NNHAL_MODELS)")
    return p


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no headless browser (Debian: apt-get install chromium; .ci/run installs it)")


def _chromium(browser: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", *args],
                          capture_output=True, text=True, timeout=180)


def test_named_parameters_and_dot_source(tmp_path, capsys):
    out = tmp_path / "palm.dot"
    assert cli.main(["graph", str(model_path("palm_detection_lite")), "-o", str(out)]) == 0
    src = out.read_text()
    assert "padding=SAME stride=2x2" in src  # the first CONV_2D, by name, not in3 = 1
    assert "in3 = " not in src and "in4 = " not in src
    assert "input_1" in src and "f32[1x192x192x3]" in src  # the input named, with its shape
    assert re.search(r"-> op\d+ \[label=\"[^\"]*\\nf32\[1x96x96x32\]", src)  # tensor name and shape on edges


def test_parameters_named_for_int8_models():
    from nnhal.tflite import load
    from nnhal.tools.graphview import named_params

    model, _ = load(model_path("vww_mobilenetv1_int8"))
    sg = model.main
    first_conv = next(op for op in sg.operations if op.type == 3)  # CONV_2D
    params, consts = named_params(model, sg, first_conv)
    assert params[0].startswith("padding=") and any(p.startswith("stride=") for p in params)
    assert any(p.startswith("act=RELU") for p in params) and consts and consts[0].startswith("filter: s8")


@needs_dot
def test_formats_from_the_extension(tmp_path, capsys):
    path = str(model_path("vww_mobilenetv1_int8"))
    assert cli.main(["graph", path, "-o", str(tmp_path / "v.svg")]) == 0
    root = ET.parse(tmp_path / "v.svg").getroot()
    assert root.tag.endswith("svg") and len([g for g in root.iter("{http://www.w3.org/2000/svg}g")
                                             if g.get("id", "").startswith("op")]) == 33
    assert cli.main(["graph", path, "-o", str(tmp_path / "v.png")]) == 0
    assert (tmp_path / "v.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert cli.main(["graph", path, "-o", str(tmp_path / "v.jpeg2")]) == 2
    err = capsys.readouterr().err
    assert "unknown picture format 'jpeg2'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "v.jpeg2").exists()


@needs_dot
def test_page_in_headless_chromium(tmp_path):
    browser = _browser()
    page = tmp_path / "palm.html"
    assert cli.main(["graph", str(model_path("palm_detection_lite")), "-o", str(page), "--device", "sample-quant"]) == 0
    text = page.read_text()
    assert "http://" not in text.split("<body>")[1].replace("http://www.w3.org", "")  # NOTE: works offline
    assert "refused by sample-quant" in text  # NOTE: the legend names the device
    r = _chromium(browser, ["--dump-dom", page.as_uri() + "#q=DEPTHWISE_CONV_2D&select=op0"], tmp_path)
    dom = r.stdout
    assert 'data-ready="1"' in dom, r.stderr[-2000:]
    ops = set(re.findall(r'<g id="op(\d+)" class="node[^"]*"', dom))
    assert ops == {str(k) for k in range(119)}  # every operation is drawn
    assert len(re.findall(r'<g id="op\d+" class="node hit"', dom)) == 23  # the search finds each depthwise conv
    assert "23 matches" in dom
    assert "refused: sample-quant takes operations whose first input is TENSOR_QUANT8" in dom  # op 0's details
    shot = tmp_path / "shot.png"
    r = _chromium(browser, ["--window-size=1200,800", f"--screenshot={shot}", page.as_uri()], tmp_path)
    assert shot.exists() and shot.stat().st_size > 10000, r.stderr[-2000:]


@needs_dot
def test_partitions_as_groups_and_no_device_legend_without_device(tmp_path, capsys):
    path = str(model_path("vww_mobilenetv1_int8"))
    page = tmp_path / "v.html"
    assert cli.main(["graph", path, "-o", str(page)]) == 0
    assert "refused by" not in page.read_text()  # NOTE: no device, no device legend (the plan's partitions have one)
    dot = tmp_path / "v.dot"
    assert cli.main(["graph", path, "-o", str(dot), "--devices", "sample-quant,sample-float-fast"]) == 0
    src = dot.read_text()
    assert "cluster_g0" in src and re.search(r'label="partition \d+: sample-quant"', src)
    capsys.readouterr()
    assert cli.main(["graph", path, "-o", str(dot), "--device", "sample-all", "--devices", "sample-quant"]) == 2
    assert "give one" in capsys.readouterr().err


def test_groups_from_a_plan_mapping(tmp_path):
    """The input a delegate plan gives: operation index -> (group label, colour)."""
    from nnhal.tflite import load
    from nnhal.tools.graphview import GraphInfo, dot_source

    model, _ = load(model_path("vww_mobilenetv1_int8"))
    n = len(model.main.operations)
    groups = {k: ("NNAPI: litert-cpu", "#80b1d3") if k < 10 else ("CPU fallback", "#fb8072") for k in range(n)}
    src, details = dot_source(model, GraphInfo(title="t", groups=groups))
    assert src.count("subgraph cluster_g") == 2 and 'label="CPU fallback"' in src
    assert details[3]["group"] == "NNAPI: litert-cpu"


def test_control_flow_names_its_subgraphs():
    from nnhal.conformance import vectors
    from nnhal.conformance.vectors import default_vectors
    from nnhal.tools.graphview import GraphInfo, dot_source

    vec = Path(default_vectors()) / "V1_3" / "while_sum_of_powers_quant8.json.gz"
    if not vec.exists():
        pytest.skip("no vectors")
    model = vectors.load_file(vec)[0].build_model()
    src, details = dot_source(model, GraphInfo(title="w"))
    assert "cond=subgraph 0 body=subgraph 1" in src and "cluster_ref0" in src and "r0_op0" in src
