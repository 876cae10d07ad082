"""``aet.run`` and ``aet.query`` on real runs (root, eBPF)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import aet
from conftest import opens, write_policy


def test_a_run_gives_its_verdict_findings_ledger_and_summary(aet_bin: str, tmp_path: Path) -> None:
    key = tmp_path / "key.txt"
    key.write_text("42\n")
    policy = write_policy(tmp_path / "p.toml", f"[cheats]\nkey = '^{key}$'\n")
    r = aet.run(["sh", "-c", f"cat {key}; exit 3"], out=tmp_path / "run", policy=policy,
                daemon=False)
    assert r.exit_status == 3 and r.stdout == b"42\n"
    assert r.complete and r.reasons == []
    assert r.verdict == "disqualified"
    assert [(f["list"], f["rule"], f["path"]) for f in r.findings] == [
        ("cheat_hits", "cheats.key", str(key))]
    assert r.report is not None and r.report.name == "audit.html"
    assert opens(r, str(key)), "the read is a row of the ledger"
    s = r.summary()
    assert (s.dir, s.exit_status, s.complete, s.verdict) == (tmp_path / "run", 3, True,
                                                              "disqualified")
    assert r.phases[0]["name"] == "agent"


def test_a_missing_command_is_its_exit_status_not_an_exception(aet_bin: str, tmp_path: Path) -> None:
    r = aet.run(["/nonexistent/agent"], out=tmp_path / "r")
    assert r.exit_status == 127 and r.complete and r.verdict is None


def test_runs_without_a_daemon_argument_are_served_by_one_daemon(aet_bin: str,
                                                                   tmp_path: Path) -> None:
    # The suite's socket has no daemon of its own: the first run that needed one started it.
    first = aet.run(["true"], out=tmp_path / "a")
    second = aet.run(["true"], out=tmp_path / "b")
    served = [json.loads(r.metadata["aet.monitor"]) for r in (first, second)]
    assert [s["served_by"] for s in served] == ["daemon", "daemon"]
    assert served[0]["pid"] == served[1]["pid"]
    alone = aet.run(["true"], out=tmp_path / "c", daemon=False)
    assert json.loads(alone.metadata["aet.monitor"])["served_by"] == "standalone"


def test_a_run_without_out_gets_a_new_directory_under_runs(
        aet_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = aet.run(["true"]), aet.run(["true"])
    assert first.dir != second.dir, "two runs of one second share no directory"
    for r in (first, second):
        assert r.dir.parent == Path("runs") and r.dir.name.startswith("20"), r.dir
        assert r.complete and r.exit_status == 0 and r.verdict is None
        assert (tmp_path / r.dir / "ledger.arrow").is_file()


def test_the_binary_is_aet_bin_else_the_one_installed_with_the_package(
        aet_bin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from aet import _binary
    monkeypatch.delenv("AET_BIN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    # The tree's package (tests import python/src) was not installed with a binary.
    assert _binary.installed_binary() is None
    with pytest.raises(aet.AetNotFound, match="wheel"):
        _binary.aet_binary()
    monkeypatch.setenv("AET_BIN", aet_bin)
    assert _binary.aet_binary() == aet_bin


def test_a_run_past_its_timeout_is_stopped_and_its_ledger_finished(aet_bin: str, tmp_path: Path) -> None:
    with pytest.raises(aet.RunTimeout) as e:
        aet.run(["sleep", "30"], out=tmp_path / "r", timeout=3, daemon=False)
    assert e.value.result is not None
    assert e.value.result.exit_status == 143
    assert e.value.result.metadata["aet.finished"] == "true"


def test_query_over_runs_is_a_table(aet_bin: str, tmp_path: Path) -> None:
    for name in ("a", "b"):
        aet.run(["true"], out=tmp_path / "runs" / name)
    t = aet.query("select run, complete, events > 0 as some from runs order by run",
                  tmp_path / "runs")
    assert t.to_pylist() == [{"run": "a", "complete": True, "some": True},
                             {"run": "b", "complete": True, "some": True}]
    with pytest.raises(aet.AetError) as e:
        aet.query("select nothing from nowhere", tmp_path / "runs")
    assert e.value.exit_code == 4 and "nowhere" in e.value.message


def test_an_identity_run_without_a_sandbox_writes_its_own_home(aet_bin: str,
                                                                tmp_path: Path) -> None:
    import os
    import tempfile

    # pytest's tmp_path sits under a 0700 directory: the agent could not pass through it.
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        base = Path(d)
        base.chmod(0o755)
        ws = base / "ws"
        ws.mkdir()
        out = base / "run"
        r = aet.run(["sh", "-c", 'touch "$HOME/state" && id -u'], out=out, identity=True,
                    aet_args=["--workspace", str(ws)])
        assert r.exit_status == 0, r.stderr
        uid = int(r.stdout.decode().strip())
        assert uid != 0
        st = (out / "agent-home" / "state").stat()
        assert (st.st_uid, st.st_gid) == (uid, uid)
        assert os.stat(out / "agent-home").st_mode & 0o777 == 0o700
    # A workspace the agent cannot reach is refused, naming the directory in the way.
    (tmp_path / "ws").mkdir()
    with pytest.raises(aet.AetError, match="is mode 0700"):
        aet.run(["true"], out=tmp_path / "r", identity=True,
                aet_args=["--workspace", str(tmp_path / "ws")])
