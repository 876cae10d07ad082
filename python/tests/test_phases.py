"""Phases: the grader's reads are its own, and what the agent leaves running is found."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import aet
from conftest import opens

ROOT = Path(__file__).resolve().parents[2]


def test_a_read_of_the_tests_is_a_cheat_in_agent_and_allowed_in_grading(
    aet_bin: str, docker_image: str, policy: Path, tmp_path: Path
) -> None:
    def session(out: Path, grade_only: bool) -> aet.RunResult:
        with aet.container(docker_image, out=out, policy=policy) as c:
            if not grade_only:
                c.exec(["cat", "/tests/test_answer.sh"])
            c.phase("grading")
            assert c.exec(["sh", "/tests/test_answer.sh"]).stdout == b"grading\n"
        assert c.result is not None
        return c.result

    agent = session(tmp_path / "agent-reads", grade_only=False)
    assert agent.verdict == "disqualified"
    cheats = [f for f in agent.findings if f["list"] == "cheat_hits"]
    assert [(f["rule"], f["phase"]) for f in cheats] == [("cheats.tests", "agent")]
    graded = session(tmp_path / "grader-reads", grade_only=True)
    assert graded.verdict == "clean", graded.findings
    rows = opens(graded, "/tests/test_answer.sh")
    assert rows and {r["phase"] for r in rows} == {"grading"}
    assert [p["name"] for p in graded.phases] == ["agent", "grading"]
    assert graded.audit is not None
    assert [(p["name"], p["judged_by"]) for p in graded.audit["phases"]] == [
        ("agent", "policy"), ("grading", "phases.grading")]


def test_a_background_process_of_the_agent_that_writes_during_grading_is_named(
    aet_bin: str, docker_image: str, policy: Path, tmp_path: Path
) -> None:
    with aet.container(docker_image, out=tmp_path / "run", policy=policy) as c:
        c.exec(["sh", "-c", "(sleep 2; echo 1 passed > /data/results.txt) >/dev/null 2>&1 &"])
        c.phase("grading")
        time.sleep(3)
        assert c.read_file("/data/results.txt") == b"1 passed\n"
    r = c.result
    assert r is not None and r.verdict == "disqualified"
    lingering = [f for f in r.findings if f["rule"] == "processes.lingering"]
    assert lingering, r.findings
    # On a loaded machine the background shell may exec its `sleep` after grading began: that
    # exec is named too (a warning), so the write is looked for among them, not assumed first.
    writes = [f for f in lingering if f["path"].startswith("/data/results.txt")]
    assert writes, lingering
    f = writes[0]
    assert f["list"] == "cheat_hits" and f["phase"] == "grading"
    assert "started in agent" in f["path"]
    assert f["comm"] == "sh"


def test_the_docker_sdk_example_runs_the_swe_bench_flow(aet_bin: str, docker_image: str,
                                                         tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "examples/harness/swebench_flow.py"),
                        "--image", docker_image, "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = aet.RunResult.load(tmp_path / "run")
    assert r.complete and r.verdict == "clean", r.findings
    assert [p["name"] for p in r.phases] == ["agent", "grading"]
    assert "verdict clean" in p.stdout
    # The tests read the agent's fix: the solution, no finding.
    assert r.provenance and r.provenance[0]["files"].get("solution") == 1, r.provenance
