"""Recorded container sessions on real Docker and Podman (root, eBPF)."""

from __future__ import annotations

from pathlib import Path

import pytest

import aet
from conftest import engine_has, exec_rows, opens


def test_every_exec_and_file_of_a_session_is_recorded(
    aet_bin: str, engine_image: tuple[str, str], tmp_path: Path
) -> None:
    engine, image = engine_image
    with aet.container(image, engine=engine, out=tmp_path / "run", daemon=False) as c:
        assert c.exec(["cat", "/data/inside.txt"]) == (0, b"the container's own file\n", b"")
        c.write_file("/work/notes/plan.txt", "step 1\n")
        status, out, _ = c.exec(["cat", "/work/notes/plan.txt"], workdir="/work")
        assert (status, out) == (0, b"step 1\n")
        assert c.exec(["sh", "-c", "exit 7"]).exit_status == 7
        assert c.read_file("/work/notes/plan.txt") == b"step 1\n"
        with pytest.raises(FileNotFoundError):
            c.read_file("/nope")
        with pytest.raises(IsADirectoryError):
            c.read_file("/data")
        with pytest.raises(IsADirectoryError):
            c.write_file("/data", "x")
        name = c.name
    r = c.result
    assert r is not None and r.complete, r.reasons
    assert not engine_has(engine, name), "the container is gone after the block"
    argvs = [row["argv"] for row in exec_rows(r)]
    for want in (["cat", "/data/inside.txt"], ["cat", "/work/notes/plan.txt"],
                 ["sh", "-c", "exit 7"], ["sleep", "infinity"]):
        assert want in argvs, f"{want} is not among the execs {argvs}"
    plan = opens(r, "/work/notes/plan.txt")
    written = [o for o in plan if (o["flags"] or 0) & 0o3]
    read = [o for o in plan if not (o["flags"] or 0) & 0o3]
    assert written and read, plan


def test_a_container_that_cannot_start_raises_with_the_engines_message(
    aet_bin: str, engine_image: tuple[str, str], tmp_path: Path
) -> None:
    engine, _ = engine_image
    with pytest.raises(aet.ContainerError) as e:
        with aet.container("aet-no-such-image:none", engine=engine, out=tmp_path / "run",
                           daemon=False):
            pytest.fail("the block must not run")
    assert "could not start the container" in e.value.message
    assert "aet-no-such-image" in e.value.message
    assert (tmp_path / "run" / "ledger.arrow").exists(), "the run was finished"


def test_an_opaque_runtime_is_refused_before_anything_starts(aet_bin: str, tmp_path: Path) -> None:
    with pytest.raises(aet.UnsupportedRuntimeError, match="runsc"):
        with aet.container("any", oci_runtime="runsc", out=tmp_path / "run"):
            pass
    assert not (tmp_path / "run").exists()
