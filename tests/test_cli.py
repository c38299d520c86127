"""The command line as a user meets it: every user error is one line on
stderr and a non-zero exit (never a traceback), Ctrl-C ends with the partial
summary, --version / bare help / -v after the subcommand, help text and an
example everywhere, ``import nnhal`` alone gives the API, ``nnhal ops``, and
quiet logs for runs that are expected to fail."""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nnhal.cli import app as cli
from nnhal.conformance import logs
from tests.conftest import vectors_root

ROOT = Path(__file__).resolve().parents[1]
ADD = vectors_root() / "V1_0" / "add.json.gz"


def nnhal_proc(*args: str, **kw) -> subprocess.Popen:  # noqa: ANN003
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.update(kw.pop("env", {}))
    return subprocess.Popen([sys.executable, "-m", "nnhal", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, **kw)


def run_nnhal(*args: str, timeout: float = 120, **kw) -> tuple[int, str, str]:  # noqa: ANN003
    p = nnhal_proc(*args, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out, err


@pytest.fixture(autouse=True)
def _restore_logging():  # noqa: ANN202
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


def one_line_error(capsys: pytest.CaptureFixture, rc: int) -> str:
    cap = capsys.readouterr()
    assert rc != 0
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(lines) == 1, cap.err
    assert "Traceback" not in cap.err
    return lines[0]


# ---------------------------------------------------------------------------
# user errors


def test_missing_path(capsys: pytest.CaptureFixture) -> None:
    line = one_line_error(capsys, cli.main(["conformance", "/nonexistent"]))
    assert line == "nnhal conformance: no such vector file or directory: /nonexistent"


def test_unknown_operation_suggests(capsys: pytest.CaptureFixture) -> None:
    line = one_line_error(capsys, cli.main(["conformance", "--ops", "CONV2D", str(ADD)]))
    assert "no operation named CONV2D" in line and "did you mean CONV_2D" in line


def test_unknown_model_suggests(capsys: pytest.CaptureFixture) -> None:
    line = one_line_error(capsys, cli.main(["conformance", "--model", "add_flaot", str(ADD.parent)]))
    assert "--model add_flaot" in line and "closest:" in line and "add" in line


@pytest.mark.parametrize("flag", ["--json", "--html", "--junit-xml"])
def test_unwritable_report_checked_before_the_run(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    t0 = time.perf_counter()
    line = one_line_error(capsys, cli.main(["conformance", str(vectors_root()), flag,
                                            str(tmp_path / "no" / "such" / "r.out")]))
    assert flag in line and "no such directory" in line
    assert time.perf_counter() - t0 < 5  # NOTE: refused before 6000 models ran
    line = one_line_error(capsys, cli.main(["conformance", str(ADD), flag, str(tmp_path)]))
    assert "is a directory" in line


def test_unwritable_report_read_only(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    line = one_line_error(capsys, cli.main(["conformance", str(ADD), "--json", str(ro / "r.json")]))
    assert "not writable" in line


def test_unknown_device(capsys: pytest.CaptureFixture) -> None:
    line = one_line_error(capsys, cli.main(["conformance", str(ADD), "--device", "sample-al"]))
    assert "no device named 'sample-al'" in line and "did you mean sample-all" in line
    line = one_line_error(capsys, cli.main(["ops", "--device", "nope"]))
    assert "no device named 'nope'" in line


@pytest.mark.parametrize("argv", [["run", "m.tflite", "--threads", "0"], ["run", "m.tflite", "--threads", "-1"],
                                  ["bench", "--threads", "0"], ["bench", "--threads", "-1", "--runs", "1"]])
def test_threads_must_be_positive(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    line = one_line_error(capsys, cli.main(argv))
    assert "--threads" in line and "1 or more" in line


def test_jobs_must_be_positive(capsys: pytest.CaptureFixture) -> None:
    line = one_line_error(capsys, cli.main(["conformance", str(ADD), "--jobs", "0"]))
    assert "--jobs 0" in line


def test_corrupt_and_truncated_files_named_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shutil.copy(ADD, tmp_path / "good.json.gz")
    data = ADD.read_bytes()
    (tmp_path / "truncated.json.gz").write_bytes(data[: len(data) // 2])
    (tmp_path / "garbage.json.gz").write_bytes(b"not a gzip file at all")
    (tmp_path / "wrong.json.gz").write_bytes(gzip.compress(json.dumps({"spec": "x", "models": [{}]}).encode()))
    rc = cli.main(["conformance", str(tmp_path), "--mode", "sync", "--no-progress", "--jobs", "1"])
    cap = capsys.readouterr()
    assert rc == 1 and "Traceback" not in cap.err, cap.err
    for bad in ("truncated.json.gz", "garbage.json.gz", "wrong.json.gz"):
        assert sum(bad in ln for ln in cap.err.splitlines()) == 1, cap.err
    assert "3 unreadable vector files" in cap.out
    assert "0 failed" in cap.out and "models: 2 passed" in cap.out  # NOTE: the good file still ran


def test_missing_vectors_explained(tmp_path: Path) -> None:
    rc, out, err = run_nnhal("conformance", cwd=tmp_path, env={"NNHAL_VECTORS": str(tmp_path / "nowhere")})
    assert rc == 2 and "Traceback" not in err
    assert "NNHAL_VECTORS" in err and "export NNHAL_VECTORS=" in err and len(err.strip().splitlines()) == 1


def test_bad_model_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.tflite"
    bad.write_bytes(b"\0" * 16)
    rc, _, err = run_nnhal("graph", str(bad), "-o", str(tmp_path / "x.svg"))
    assert rc != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def _drain(stream, lines: queue.Queue) -> None:  # noqa: ANN001
    for ln in stream:
        lines.put(ln)


def test_ctrl_c_prints_the_partial_summary() -> None:
    for jobs in ("1", "2"):
        p = nnhal_proc("conformance", str(vectors_root() / "V1_0"), "--progress", "--jobs", jobs)
        try:
            lines: queue.Queue = queue.Queue()
            reader = threading.Thread(target=_drain, args=(p.stderr, lines), daemon=True)
            reader.start()
            first = lines.get(timeout=120)  # NOTE: the first progress line: models have run
            assert "models" in first and "ETA" in first, first
            p.send_signal(signal.SIGINT)
            p.wait(60)
            out = p.stdout.read()
            reader.join(10)
            err = "".join(lines.queue)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode == 130, (out, err)
        assert "Traceback" not in err, err
        assert "interrupted" in out and "conformance: " in out and "(interrupted)" in out
        ran = re.search(r"^(\d+) models \(", out, re.M)
        assert ran and 0 < int(ran.group(1)) < 349, out


# ---------------------------------------------------------------------------
# conventions


def test_version(capsys: pytest.CaptureFixture) -> None:
    import nnhal

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"nnhal {nnhal.__version__}"


def test_bare_nnhal_prints_help(capsys: pytest.CaptureFixture) -> None:
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: nnhal") and "conformance" in out and "examples:" in out


def _parsers(p: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(p.prog, p)]
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sp in a.choices.values():
                out += _parsers(sp)
    return out


def test_every_option_has_help_and_every_command_an_example() -> None:
    parsers = _parsers(cli.build_parser())
    assert len(parsers) >= 9
    for prog, p in parsers:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                continue
            assert a.help, f"{prog}: {a.option_strings or a.dest} has no help text"
        if prog != "nnhal":
            assert p.epilog and "nnhal " in p.epilog, f"{prog}: no example"


def test_verbose_and_quiet_after_the_subcommand(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["ops", "-v"]) == 0
    assert logging.getLogger().level == logging.INFO
    assert cli.main(["ops", "-vv"]) == 0
    assert logging.getLogger().level == logging.DEBUG
    assert cli.main(["-v", "ops"]) == 0
    assert logging.getLogger().level == logging.INFO
    assert cli.main(["ops", "-q"]) == 0
    assert logging.getLogger().level > logging.CRITICAL
    assert cli.main(["conformance", str(ADD), "--mode", "sync", "-q", "--jobs", "1"]) == 0
    assert "0 failed" in capsys.readouterr().out


def test_import_nnhal_is_enough() -> None:
    code = ("import nnhal\n"
            "m = nnhal.memory.allocate(64)\n"
            "v = nnhal.memory.map(m); v[0] = 7; assert v[0] == 7; v.release(); nnhal.memory.free(m)\n"
            "assert nnhal.hal.ErrorStatus.NONE == 0\n"
            "assert nnhal.fence.signaled is not None and nnhal.burst.BurstController is not None\n"
            "d = nnhal.get_device('sample-all'); assert d.getStatus() == nnhal.hal.DeviceStatus.AVAILABLE\n"
            "try:\n    nnhal.no_such_thing\nexcept AttributeError:\n    print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ---------------------------------------------------------------------------
# nnhal ops


def _ops_lines(text: str) -> dict[str, str]:
    return {ln.split()[0]: ln for ln in text.splitlines()[1:] if ln.strip() and ln.split()[0].isupper()}


def test_ops_from_the_signatures(capsys: pytest.CaptureFixture) -> None:
    from nnhal import hal

    assert cli.main(["ops"]) == 0
    rows = _ops_lines(capsys.readouterr().out)
    assert set(rows) == {t.name for t in hal.OperationType}
    assert "float32 1.0" in rows["ADD"] and "quant8_asymm_signed 1.3" in rows["ADD"]
    assert "float16 1.2" in rows["ROI_ALIGN"] and "quant8_asymm 1.2" in rows["ROI_ALIGN"]
    assert "float32 1.3" in rows["HARD_SWISH"] and "1.0" not in rows["HARD_SWISH"]
    # NOTE: the AIDL HAL's operations and operand types with their AIDL versions; PACK named by its tensors
    assert rows["PACK"].split(None, 1)[1] == ("float16 AIDL v2, float32 AIDL v2, int32 AIDL v2, quant8_asymm AIDL v2, "
                                              "quant8_asymm_signed AIDL v2")
    assert "quant8_asymm_signed AIDL v2" in rows["BATCH_MATMUL"] and "quant8_asymm AIDL" not in rows["BATCH_MATMUL"]
    assert "float32 AIDL v3" in rows["MIRROR_PAD"] and "int32 AIDL v3" in rows["REVERSE"]
    assert rows["RESHAPE"].endswith("quant8_asymm_signed 1.3, int32 AIDL v2")
    assert rows["RSQRT"].endswith("float32 1.2, quant8_asymm AIDL v3, quant8_asymm_signed AIDL v3")


def test_ops_as_the_device_answers(capsys: pytest.CaptureFixture) -> None:
    # NOTE: tests/test_opsupport.py has the rest (litert-cpu, a partial driver, a service, the reasons)
    assert cli.main(["ops", "--device", "sample-all", "--ops", "MUL,HARD_SWISH"]) == 0
    out = capsys.readouterr().out
    assert "refused" not in out  # NOTE: sample-all takes every vector form and every signature it declares
    assert re.search(r"^  quant8 signed +HAL 1.3 +supported in (\d+) of \1 vector forms; unknown shapes: "
                     r"supported$", out, re.M), out
    swish = out[out.index("HARD_SWISH: supported"):out.index("MUL: ")]
    assert re.search(r"^  float32 +HAL 1.3 +supported in", swish, re.M) and "HAL 1.0" not in swish, out
    assert re.search(r"^2 of 2 operations supported by sample-all in at least one vector form", out, re.M), out


# ---------------------------------------------------------------------------
# logs


def test_expected_failures_do_not_flood_and_lines_name_the_model(capsys: pytest.CaptureFixture) -> None:
    path = vectors_root() / "V1_3" / "while_infinite_loop.json.gz"
    # NOTE: sync and async only: the burst has no loop timeout and waits out the default 2 s
    assert cli.main(["-v", "conformance", str(path), "--mode", "sync", "--no-progress", "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    assert "ERROR" not in err and "WARNING" not in err, err
    assert cli.main(["-vv", "conformance", str(path), "--mode", "async", "--no-progress", "--jobs", "1"]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("DEBUG nnhal")]
    assert lines, "the rejection is still there at DEBUG"
    assert all("[while_infinite_loop" in ln for ln in lines), lines[:5]


def test_run_filter_lowers_only_expected_failures() -> None:
    f = logs.RunFilter(debug=False)

    def rec(level: int) -> logging.LogRecord:
        return logging.LogRecord("nnhal.driver", level, __file__, 1, "rejected", (), None)

    with logs.running("m1"):
        r = rec(logging.ERROR)
        assert f.filter(r) and r.levelno == logging.ERROR and r.model == "m1"
    with logs.running("m2", expect_failure=True):
        r = rec(logging.ERROR)
        assert not f.filter(r) and r.levelname == "DEBUG" and r.model == "m2"
        assert logs.RunFilter(debug=True).filter(rec(logging.WARNING))
    assert logs.current_model() == "-"
