"""Every .tflite through every command (issue 29): the inputs that broke ``nnhal run`` (one line and exit
2 from run, run --plan max, bench and graph), one written reproducer per class of failure, LiteRT
contained in its process (a hang, a crash while preparing or running, answers read as data, the same
results as in process, nothing left behind), nothing allocated on a file's word, and the commands
fuzzed (a few inputs per family here; ``python -m pytest -m fuzz tests/test_contain.py`` for
``$NNHAL_FUZZ_MINUTES`` per family)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed (pip install 'nnhal[litert]')")

import nnhal  # noqa: E402
from nnhal import cli  # noqa: E402
from nnhal.delegate import contain  # noqa: E402
from nnhal.delegate.run import ExecutionError, check_output_sizes, make_inputs  # noqa: E402
from nnhal.delegate.runner import PlanError, Runner  # noqa: E402
from nnhal.tflite import InvalidModelError, load  # noqa: E402
from nnhal.tflite.loader import IODescription, TensorDesc  # noqa: E402
from nnhal.tflite.schema import read_model, schema, write_model  # noqa: E402
from nnhal.tflite.writer import Tensor, graph, one_op, options, subgraphs  # noqa: E402
from tests.delegate_util import plan_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = Path(os.environ.get("NNHAL_FUZZ_FINDINGS") or ROOT / ".." / "shared" / "fuzz-findings" / "tflite")
CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|Traceback")


def nnhal_cli(argv: list[str], capsys, out: list | None = None) -> tuple[int, list[str]]:
    """(exit status, the lines on stderr); ``out`` receives the lines on stdout."""
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    got = capsys.readouterr()
    if out is not None:
        out += [ln for ln in got.out.splitlines() if ln.strip()]
    return rc, [ln for ln in got.err.splitlines() if ln.strip()]


def edit(data: bytes, fn) -> bytes:
    m = read_model(data)
    fn(m)
    return write_model(m)


def invalid(data: bytes, match: str) -> None:
    with pytest.raises(InvalidModelError, match=match):
        load(data)


# --------------------------------------------------------------------------- the shared findings


@pytest.mark.parametrize("command", [["run"], ["run", "--plan", "max"], ["bench", "--runs", "2"], ["graph", "-o"]])
def test_shared_findings_are_one_line_and_exit_2(command, tmp_path, capsys):
    files = sorted(FINDINGS.glob("*.tflite"))
    if not files:
        pytest.skip(f"no inputs in {FINDINGS} (set NNHAL_FUZZ_FINDINGS)")
    for f in files:
        argv = [command[0], str(f)] + command[1:] + ([str(tmp_path / "g.svg")] if command[-1] == "-o" else [])
        out: list[str] = []
        rc, err = nnhal_cli(argv, capsys, out)
        assert rc == 2 and len(err) == 1 and not out, (argv, rc, err, out)  # NOTE: one line in all
        assert "not a valid TFLite model" in err[0] and not CLASS_NAME.search(err[0]), err


# --------------------------------------------------------------------------- one reproducer per class


def test_tensor_read_before_anything_writes_it(tmp_path, capsys):
    # 4c1b2c4e44: a DEQUANTIZE of a float16 tensor whose buffer is empty, no input: KeyError 0 in the runner
    data = graph([Tensor([2, 3], "float16"), Tensor([2, 3])], [("DEQUANTIZE", [0], [1], None)], [], [1])
    invalid(data, r"operator 0 DEQUANTIZE reads tensor 0 \(t0\), which nothing writes before it")
    p = tmp_path / "m.tflite"
    p.write_bytes(data)
    rc, err = nnhal_cli(["run", str(p)], capsys)
    assert rc == 2 and len(err) == 1 and "nothing writes" in err[0], err


def test_the_runner_checks_its_plan_dataflow_too(monkeypatch):
    """A graph the file check did not see (a plan made some other way) still never reaches a KeyError."""
    from nnhal.tflite import graphcheck

    data = graph([Tensor([2, 3], "float16"), Tensor([2, 3])], [("DEQUANTIZE", [0], [1], None)], [], [1])
    monkeypatch.setattr(graphcheck, "check", lambda m, max_bytes: None)
    with pytest.raises(PlanError, match=r"reads tensor 0 \(t0\), which nothing writes") as e:
        Runner(plan_of(data), nnhal.get_device)
    assert e.value.status == 2
    no_writer = graph([Tensor([2]), Tensor([2]), Tensor([2])], [("ABS", [0], [1], None)], [0], [2])
    with pytest.raises(PlanError, match=r"model output tensor 2 \(t2\) is written by nothing"):
        Runner(plan_of(no_writer), nnhal.get_device)


def test_sparse_tensor_without_its_data():
    # 5872e48f78: TypeError in delegate/model.py before
    def sparse(m):
        m.subgraphs[0].tensors[0].sparsity = schema().SparsityParametersT()

    invalid(edit(one_op("ABS", [Tensor([1, 4])], [Tensor([1, 4])]), sparse),
            r"tensor 0 \(input_0\) is sparse but holds no data")


def test_dataflow_the_interpreter_assumes():
    # 17abf5d69c's SELECT_V2 wrote its output twice
    ts = [Tensor([3], "bool"), Tensor([3]), Tensor([3]), Tensor([3])]
    invalid(graph(ts, [("SELECT_V2", [0, 1, 2], [3, 3], None)], [0, 1, 2], [3]),
            r"operator 0 SELECT_V2 writes tensor 3 \(t3\), which it writes already")
    invalid(graph([Tensor([2]), Tensor([2])], [("ABS", [0], [1], None), ("NEG", [0], [1], None)], [0], [1]),
            "operator 1 NEG writes tensor 1 .*, which operator 0 writes already")
    invalid(graph([Tensor([2]), Tensor([2])], [("ABS", [1], [0], None)], [0, 1], [0]), "writes tensor 0 .*, a subgraph input")
    const = Tensor([2], data=np.ones(2, np.float32))
    invalid(graph([Tensor([2]), const], [("ABS", [0], [1], None)], [0], [1]), r"writes tensor 1 \(t1\), a constant")
    invalid(edit(one_op("ABS", [Tensor([2])], [Tensor([2])]),
                 lambda m: setattr(m.subgraphs[0].operators[0], "outputs", np.array([-1], np.int32))),
            "an omitted")
    # an operator reading a later operator's output
    invalid(graph([Tensor([2]), Tensor([2]), Tensor([2])], [("ABS", [1], [2], None), ("NEG", [0], [1], None)],
                  [0], [2]), "operator 0 ABS reads tensor 1")
    # what the interpreter does allow: a tensor of no elements, a variable, an output that is an input
    empty = Tensor([0], "int32", data=np.zeros(0, np.int32))
    load(graph([Tensor([2, 3]), empty, Tensor([6])], [("RESHAPE", [0, 1], [2], None)], [0], [2]))


def _ssd(opts: bytes, anchors: list[int] = (6, 4), ins: int = 3) -> bytes:
    ts = [Tensor([1, 6, 4]), Tensor([1, 6, 3]), Tensor(list(anchors), data=np.ones(anchors, np.float32))]
    return one_op("TFLite_Detection_PostProcess", ts[:ins], [Tensor([1, 3, 4]), Tensor([1, 3]), Tensor([1, 3]),
                                                             Tensor([1])], custom_options=opts)


def test_detection_postprocess_as_litert_reads_it():
    """d96568216c: LiteRT's kernel parsed options that were not there (SIGSEGV in nnhal's process)."""
    from flatbuffers import flexbuffers

    good = {"num_classes": 2, "max_detections": 3, "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0}
    load(_ssd(flexbuffers.Dumps(good)))
    invalid(_ssd(flexbuffers.Dumps(good), ins=2), r"needs 3 inputs \(boxes, scores, anchors\) and 4 outputs; it has 2")
    invalid(_ssd(b""), "num_classes 0, max_detections 0")
    invalid(_ssd(flexbuffers.Dumps(good), anchors=[5, 4]), r"anchors \[5, 4\]")
    invalid(_ssd(flexbuffers.Dumps({**good, "max_detections": 2**30})), "detections need .* above the limit")


def test_kernels_that_trust_their_options():
    c = Tensor([], "int32", data=np.int32(0))
    invalid(graph([c, Tensor([4, 2]), Tensor([2, 2]), Tensor([2, 2])],
                  [("SPLIT", [0, 1], [2, 3], options("SplitOptions", numSplits=3))], [1], [2, 3]),
            "splits into 3 but has 2 outputs")
    invalid(one_op("LOCAL_RESPONSE_NORMALIZATION", [Tensor([1, 2, 2, 4])], [Tensor([1, 2, 2, 4])],
                   options("LocalResponseNormalizationOptions", radius=-1, bias=1.0, alpha=1.0, beta=0.5)),
            r"negative radius \(-1\)")


def test_input_of_a_type_no_array_holds(tmp_path, capsys):
    data = edit(one_op("ABS", [Tensor([2])], [Tensor([2])]), lambda m: setattr(m.subgraphs[0].tensors[0], "type", 13))
    p = tmp_path / "m.tflite"
    p.write_bytes(data)
    rc, err = nnhal_cli(["run", str(p)], capsys)
    assert rc == 2 and len(err) == 1 and "input 0 (input_0) is of TFLite type type13" in err[0], err


# --------------------------------------------------------------------------- nothing allocated on a file's word


def test_generated_inputs_drawn_in_their_own_dtype_within_the_limit():
    # 17abf5d69c: 16 GiB of int64 drawn for a [2147483647] bool input before anything checked it
    n = 1 << 24
    io = IODescription(inputs=[TensorDesc("flags", 0, [n], "bool"), TensorDesc("x", 1, [-1, 3], "int8")])
    tracemalloc.start()
    try:
        x = make_inputs(io, batch=2, seed=7)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n + (12 << 20), peak  # NOTE: the input itself and one piece of draws (8 MiB), not 8n
    rng = np.random.default_rng(7)  # NOTE: the same values as one draw of the whole (the documented stream)
    np.testing.assert_array_equal(x[0], rng.integers(0, 2, [n]).astype(np.bool_))
    np.testing.assert_array_equal(x[1], rng.integers(-128, 128, [2, 3]).astype(np.int8))
    with pytest.raises(ValueError, match=r"input 0 \(flags\) of shape \[2147483647\] is 2147483647 bytes; .*above "
                                         "the limit of 1048576 .NNHAL_TFLITE_MAX_BYTES"):
        make_inputs(IODescription(inputs=[TensorDesc("flags", 0, [2**31 - 1], "bool")]), max_bytes=1 << 20)


def test_output_sizes_a_device_asks_for_are_bounded():
    check_output_sizes([[2, 3]], [np.dtype(np.float32)], max_bytes=24)
    with pytest.raises(ExecutionError, match=r"output 1 of dimensions \[65536, 65536\] is 17179869184 bytes"):
        check_output_sizes([[1], [65536, 65536]], [np.dtype(np.float32)] * 2, max_bytes=1 << 30)


def test_densify_metadata_must_fit_the_shape():
    from nnhal.delegate.model import densify

    s = schema()
    sp = s.SparsityParametersT()
    sp.traversalOrder = np.array([0, 1], np.int32)
    sp.dimMetadata = []
    for size in (2, 2**31 - 1):  # NOTE: a dense size of 2^31-1 made np.arange(2^31-1) before
        md = s.DimensionMetadataT()
        md.format, md.denseSize = 0, size
        sp.dimMetadata.append(md)
    with pytest.raises(ValueError, match=r"sparse level 1: dense size 2147483647, the shape \[2, 3\] says 3"):
        densify(np.zeros(6, np.float32), [2, 3], sp)
    sp.dimMetadata[1].denseSize = 3
    np.testing.assert_array_equal(densify(np.arange(6, dtype=np.float32), [2, 3], sp), np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError, match="densifying a tensor of shape .* bytes of indices, above the limit of 100"):
        densify(np.zeros(6, np.float32), [2, 3], sp, max_bytes=100)


# --------------------------------------------------------------------------- LiteRT contained


def _forever() -> bytes:
    """WHILE (i < 5) { i += 0 }: LiteRT loops as long as it is let (on the CPU: no NNAPI delegate takes WHILE)."""
    i1, f2, b1 = Tensor([], "int32"), Tensor([2]), Tensor([], "bool")
    five, zero = Tensor([], "int32", data=np.int32(5)), Tensor([], "int32", data=np.int32(0))
    main = ([i1, f2, i1, f2], [("WHILE", [0, 1], [2, 3], options("WhileOptions", condSubgraphIndex=1,
                                                                  bodySubgraphIndex=2))], [0, 1], [2, 3])
    cond = ([i1, f2, five, b1], [("LESS", [0, 2], [3], None)], [0, 1], [3])
    body = ([i1, f2, zero, i1, f2], [("ADD", [0, 2], [3], options("AddOptions")), ("ABS", [1], [4], None)], [0, 1],
            [3, 4])
    return subgraphs([main, cond, body])


FOREVER_INPUTS = [np.array(0, np.int32), np.ones(2, np.float32)]


def _forever_between() -> bytes:
    """ABS, the endless WHILE, NEG: one CPU partition of three operators at API 27 (ABS / NEG from API 29)."""
    i1, f2, b1 = Tensor([], "int32"), Tensor([2]), Tensor([], "bool")
    five, zero = Tensor([], "int32", data=np.int32(5)), Tensor([], "int32", data=np.int32(0))
    main = ([i1, f2, f2, i1, f2, f2], [("ABS", [1], [2], None),
                                       ("WHILE", [0, 2], [3, 4], options("WhileOptions", condSubgraphIndex=1,
                                                                         bodySubgraphIndex=2)),
                                       ("NEG", [4], [5], None)], [0, 1], [5])
    cond = ([i1, f2, five, b1], [("LESS", [0, 2], [3], None)], [0, 1], [3])
    body = ([i1, f2, zero, i1, f2], [("ADD", [0, 2], [3], options("AddOptions")), ("ABS", [1], [4], None)], [0, 1],
            [3, 4])
    return subgraphs([main, cond, body])


def _children() -> set[int]:
    """This process's child processes."""
    out: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            out |= {int(p) for p in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def test_a_litert_hang_is_one_line_and_exit_3(tmp_path, capsys, monkeypatch):
    model = tmp_path / "forever.tflite"
    model.write_bytes(_forever())
    for k, a in enumerate(FOREVER_INPUTS):
        np.save(tmp_path / f"x{k}.npy", a)
    monkeypatch.setenv(contain.TIMEOUT_ENV, "1")
    before = _children()
    t0 = time.monotonic()
    rc, err = nnhal_cli(["run", str(model), "--input", str(tmp_path / "x0.npy"), "--input", str(tmp_path / "x1.npy")],
                        capsys)
    assert rc == 3 and len(err) == 1, err
    assert ("LiteRT hung: used more than 1 s of CPU (NNHAL_LITERT_TIMEOUT) running CPU partition 0 (operator 0 "
            "WHILE)") in err[0], err
    assert time.monotonic() - t0 < 60
    assert _children() <= before


def test_the_operator_that_ends_litert_is_found(monkeypatch):
    """In a partition of several operators, each is tried alone (in a process of its own) once LiteRT's
    process has ended: the message names the first that ends it too."""
    monkeypatch.setenv(contain.TIMEOUT_ENV, "1")
    plan = plan_of(_forever_between(), api=27)
    assert [(p.where, p.operators) for p in plan.partitions] == [("cpu", [0, 1, 2])]
    with Runner(plan, nnhal.get_device) as r, pytest.raises(contain.LiteRTCrash) as e:
        r.run(FOREVER_INPUTS)
    assert str(e.value) == ("LiteRT hung: used more than 1 s of CPU (NNHAL_LITERT_TIMEOUT) running CPU partition 0 "
                            "(operators 0-2: ABS, WHILE, NEG); operator 1 WHILE alone hangs it too")


def test_a_litert_crash_running_is_one_line_and_leaves_nothing(capsys):
    r = Runner(plan_of(_forever()), nnhal.get_device)
    proc = r.litert_process()
    got: list = []
    t = threading.Thread(target=lambda: got.append(pytest.raises(contain.LiteRTCrash, r.run, FOREVER_INPUTS)))
    t.start()
    time.sleep(0.5)  # NOTE: the child is in LiteRT's loop by now (or about to be: the signal is the same)
    os.kill(proc.proc.pid, signal.SIGSEGV)
    t.join(60)
    r.close()
    e = got[0].value
    assert e.status == 3
    assert str(e).startswith("LiteRT crashed: SIGSEGV running CPU partition 0 (operator 0 WHILE)"), e
    assert proc.proc.poll() is not None and proc.sock.fileno() < 0


def test_a_litert_crash_preparing_is_status_2(capsys):
    proc = contain.LiteRTProcess()
    try:
        os.kill(proc.proc.pid, signal.SIGSEGV)
        with pytest.raises(contain.LiteRTCrash, match=r"LiteRT crashed: SIGSEGV preparing the test model") as e:
            contain.ContainedLiteRT(proc, one_op("ABS", [Tensor([2])], [Tensor([2])]), label="the test model")
        assert e.value.status == 2
        with pytest.raises(contain.LiteRTCrash, match="ended earlier .crashed: SIGSEGV."):
            contain.ContainedLiteRT(proc, one_op("ABS", [Tensor([2])], [Tensor([2])]), label="another")
    finally:
        proc.close()


def test_answers_are_read_as_data():
    """The parent reads what the child says as it reads a file: bounded, typed, inside the shared region,
    nothing allocated first."""
    def frame(header, data: bytes = b"") -> bytes:
        h = json.dumps(header).encode()
        return struct.pack("<I", len(h)) + h + data

    cases = [
        (struct.pack("<I", contain.MAX_HEADER + 1), "a header of"),
        (frame({"nbytes": 1 << 40, "arrays": []}), "bytes of data"),
        (frame({"nbytes": 0, "arrays": [["object", [1], 0]]}), "an array described as"),
        (frame({"nbytes": 0, "arrays": [["float32", [-1], 0]]}), "an array described as"),
        # NOTE: 2^40 elements: refused before numpy would make 4 TiB of them
        (frame({"nbytes": 0, "arrays": [["float32", [1 << 20, 1 << 20], 0]]}), "in a region of 0"),
        (frame([1, 2]), "not an object"),
        (struct.pack("<I", 200000) + b"[" * 200000, "nested too deep"),
    ]
    for raw, match in cases:
        a, b = socket.socketpair()
        try:
            a.sendall(raw)
            a.shutdown(socket.SHUT_WR)
            with pytest.raises(ValueError, match=match):
                contain.Channel(b, 1 << 30).recv(copy=True)
        finally:
            a.close()
            b.close()
    a, b = socket.socketpair()
    ca, cb = contain.Channel(a, 1 << 30), contain.Channel(b, 1 << 30)
    try:
        x = [np.arange(6, dtype=np.int16).reshape(2, 3), np.array(True), np.zeros((0, 4), np.float32)]
        fd = ca.grow(contain.Channel.need(x))
        ca.send({"ok": True}, x, b"tail", fd)
        os.close(fd)
        h, arrays, rest = cb.recv(copy=True)
        assert h["ok"] and rest == b"tail"
        assert all(np.array_equal(p, q) and p.dtype == q.dtype and p.shape == q.shape for p, q in zip(arrays, x))
        # NOTE: the region's bounds hold for an answer too: an offset past its end is refused
        a.sendall(frame({"nbytes": 0, "arrays": [["int8", [2], cb.size - 1]]}))
        with pytest.raises(ValueError, match="an array of 2 bytes at"):
            cb.recv(copy=True)
    finally:
        ca.close()
        cb.close()
        a.close()
        b.close()


def test_contained_partitions_compute_what_in_process_ones_do(monkeypatch):
    """vww at API 27: a 28-operator and two 1-operator CPU partitions between NNAPI ones, bit for bit the same
    in LiteRT's process as in nnhal's; the round trips are counted apart from the partitions' times."""
    path = ROOT / ".." / "shared" / "models" / "vww_mobilenetv1_int8.tflite"
    if not path.exists():
        pytest.skip(f"{path} is missing")
    plan = plan_of(path.read_bytes(), api=27)
    x = [np.random.default_rng(3).uniform(-1, 1, [1, 96, 96, 3]).astype(np.float32)]
    outs = {}
    for mode in ("0", "1"):
        monkeypatch.setenv(contain.IN_PROCESS_ENV, mode)
        with Runner(plan, nnhal.get_device) as r:
            outs[mode] = r.run(x)
            assert (r._process is None) == (mode == "1")
            assert (r.contained > 0) == (mode == "0")
    for a, b in zip(outs["0"], outs["1"]):
        np.testing.assert_array_equal(a, b)


def test_litert_process_memory_is_capped(monkeypatch):
    """The child's address space grows by at most the tensor limit + 4x its models + the slack: a TILE whose
    constant multiples make a 1 GiB output of a [1] the file declares (LiteRT allocates it in process) fails
    there, and this process allocates nothing for it."""
    monkeypatch.setenv("NNHAL_TFLITE_MAX_BYTES", str(64 << 20))
    mult = Tensor([1], "int32", data=np.array([1 << 28], np.int32))
    model = graph([Tensor([1]), mult, Tensor([1])], [("TILE", [0, 1], [2], None)], [0], [2])
    load(model)  # NOTE: a valid file: what it allocates depends on a constant's value
    proc = contain.LiteRTProcess()
    try:
        with pytest.raises(contain.LiteRTError, match="LiteRT failed without saying why .* address space"):
            contain.ContainedLiteRT(proc, model, label="m")
        soft = int(Path(f"/proc/{proc.proc.pid}/limits").read_text().split("Max address space")[1].split()[0])
        vm = int(next(ln for ln in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines()
                      if ln.startswith("VmSize")).split()[1]) * 1024
        assert soft - vm <= (64 << 20) + contain.SLACK_BYTES + 4 * len(model), (soft, vm)
        assert proc.peak_rss_mb() < 500
    finally:
        proc.close()


# --------------------------------------------------------------------------- the commands fuzzed


def _fuzz(args: list[str], timeout: float) -> dict:
    p = subprocess.run([sys.executable, "-m", "nnhal.tools.fuzz", "tflite", "--json"] + args, capture_output=True,
                       text=True, timeout=timeout)
    res = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}
    assert res, p.stderr
    return res


def _check(res: dict, saved: Path) -> None:
    for fam, f in res["families"].items():
        assert not f["findings"], f"{fam}: inputs and messages in {saved}: " + json.dumps(f["findings"][:10], indent=1)
        assert f["commands"] > 0, (fam, f)


def test_fuzz_commands_short(tmp_path):
    res = _fuzz(["--commands", "all", "--count", "4", "--no-real", "--seed", os.environ.get("NNHAL_FUZZ_SEED", "29"),
                 "--save", str(tmp_path)], 300)
    assert set(res["families"]) == {"run", "bench", "graph", "ops"}
    _check(res, tmp_path)
    assert all(f["inputs"] == 4 for f in res["families"].values())


LONG_MINUTES = float(os.environ.get("NNHAL_FUZZ_MINUTES", "10"))


@pytest.mark.fuzz
@pytest.mark.timeout(int(4 * LONG_MINUTES * 60) + 900)
def test_fuzz_commands_long(tmp_path):
    res = _fuzz(["--commands", "all", "--minutes", str(LONG_MINUTES), "--seed", os.environ.get("NNHAL_FUZZ_SEED", "1"),
                 "--save", str(tmp_path)], 4 * LONG_MINUTES * 60 + 600)
    _check(res, tmp_path)
    print(json.dumps({fam: {k: f[k] for k in ("inputs", "commands", "seconds", "outcomes")}
                      for fam, f in res["families"].items()}))


def test_contain_cost_reads_either_latency_line() -> None:
    """contain_cost --against compares nnhal run's latency line of two trees: today's (imports, plan, prepare,
    execute) and an older one (prepare, execute); both time the prepare apart from the plan."""
    from nnhal.tools.contain_cost import _run_latency

    new = ("latency: imports 41 ms, plan 2.5 ms (read, verified, partitioned), prepare 160.0 ms (loaded from the "
           "compilation cache (d)), execute 1.0 ms (first execution; nnhal bench m.tflite for steady-state figures)")
    assert _run_latency(new) == (160.0, 1.0)
    assert _run_latency("latency: prepare 160.2 ms, execute 1.0 ms (first execution)") == (160.2, 1.0)
    assert all(np.isnan(v) for v in _run_latency("nothing"))
