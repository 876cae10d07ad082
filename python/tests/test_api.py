"""The API's own logic, with the real aet binary where aet answers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import aet
from aet.run import run_args


def test_run_options_become_aet_run_arguments(tmp_path: Path) -> None:
    a = run_args(tmp_path / "r", policy="p.toml", identity=True, mode="enforce", sign="k",
                 daemon=False, grace=0.5)
    assert a[:3] == ["run", "--out", str(tmp_path / "r")]
    for flag in (["--policy", "p.toml"], ["--mode", "enforce"], ["--sign", "k"],
                 ["--grace", "0.5"]):
        i = a.index(flag[0])
        assert a[i:i + 2] == flag
    assert "--identity" in a and "--standalone" in a
    assert "--identity=2001:2001" in run_args("r", identity="2001:2001")
    assert "--daemon" in run_args("r", daemon=True)
    assert not {"--daemon", "--standalone"} & set(run_args("r"))
    with pytest.raises(ValueError, match="'watch'"):
        run_args("r", mode="watch")


def test_a_missing_binary_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    f = tmp_path / "aet"
    f.write_text("not a program")
    monkeypatch.setenv("AET_BIN", str(f))
    with pytest.raises(aet.AetNotFound, match="is not an executable file"):
        aet.run(["true"], out=tmp_path / "r")
    monkeypatch.delenv("AET_BIN")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(aet.AetNotFound, match="put aet on PATH or set AET_BIN"):
        aet.run(["true"], out=tmp_path / "r")


def test_a_malformed_policy_is_refused_before_anything_runs(aet_bin: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[cheats]\nkey = '('\n")
    marker = tmp_path / "ran"
    with pytest.raises(aet.RefusedError) as e:
        aet.run(["touch", str(marker)], out=tmp_path / "r", policy=bad)
    assert str(bad) in e.value.message and "invalid regular expression" in e.value.message
    assert e.value.exit_code not in (None, 0)
    assert not marker.exists()
    assert not (tmp_path / "r" / "ledger.arrow").exists()


def test_a_run_that_exists_is_never_overwritten(aet_bin: str, tmp_path: Path) -> None:
    aet.run(["true"], out=tmp_path / "r")
    with pytest.raises(aet.RefusedError, match="never overwrites a ledger"):
        aet.run(["true"], out=tmp_path / "r")


def test_opaque_runtimes_are_refused_by_name() -> None:
    for named, args in (("runsc", []), (None, ["--runtime=kata-runtime"]),
                        (None, ["--runtime", "io.containerd.runsc.v1"])):
        with pytest.raises(aet.UnsupportedRuntimeError, match="kernel of its own"):
            aet.check_runtime("docker", named, args)
    with pytest.raises(aet.UnsupportedRuntimeError, match="'lxc'"):
        aet.check_runtime("lxc", None)
    aet.check_runtime("docker", "runc")


def test_read_ledger_of_a_file_that_is_not_one_raises(tmp_path: Path) -> None:
    (tmp_path / "ledger.arrow").write_bytes(b"ARROW1\0\0garbage")
    with pytest.raises(Exception):
        aet.read_ledger(tmp_path)


def test_the_package_is_typed() -> None:
    assert (Path(aet.__file__).parent / "py.typed").exists()
    assert os.stat(Path(aet.__file__)).st_mode & stat.S_IRUSR
