"""``nnhal bench --cache`` / ``--priority`` on tiny networks: the commands
run end to end and print the figures they promise."""

from __future__ import annotations

import os

from nnhal.cli import app as cli


def test_bench_cache_tiny(capsys, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("NNHAL_CACHE_KEY_DIR", str(tmp_path / "key"))
    assert cli.main(["bench", "--cache", "--size", "32", "--classes", "10", "--prepares", "1", "--loads", "2",
                     "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "prepareModel_1_3 " in out and "prepareModelFromCache_1_3" in out and "speed-up of loading" in out
    assert "equals the freshly prepared one: yes" in out
    assert (tmp_path / "key" / "cache-hmac.key").exists()
    assert oct(os.stat(tmp_path / "key" / "cache-hmac.key").st_mode & 0o777) == "0o600"


def test_bench_priority_tiny(capsys) -> None:  # noqa: ANN001
    assert cli.main(["bench", "--priority", "--size", "32", "--samples", "3", "--backlog", "4",
                     "--threads", "1"]) == 0
    out = capsys.readouterr().out
    for line in ("HIGH execution, idle driver", "HIGH execution, LOW backlog", "LOW execution, same LOW backlog"):
        assert line in out
