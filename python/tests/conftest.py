"""Fixtures of the Python package's tests: the real aet binary, real Docker and Podman, images
made here from busybox (no registry is reachable)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Iterator

import pytest

import aet

IMAGE = "aet-py-bb:test"
PODMAN_IMAGE = "localhost/aet-py-bb:test"


@pytest.fixture(scope="session")
def aet_bin() -> str:
    """The aet under test: $AET_BIN (cargo xtask test sets it), else aet on PATH."""
    try:
        return aet._binary.aet_binary()
    except aet.AetNotFound as e:
        pytest.fail(f"{e} (cargo xtask test sets AET_BIN to the binary it built)")


def _rootfs(tmp: Path) -> Path:
    root = tmp / "rootfs"
    for d in ("bin", "data", "etc", "tmp", "tests", "work"):
        (root / d).mkdir(parents=True, exist_ok=True)
    busybox = shutil.which("busybox") or "/bin/busybox"
    shutil.copy(busybox, root / "bin/busybox")
    for c in ("sh", "cat", "ls", "sleep", "echo", "mkdir", "dirname", "rm", "true", "env",
              "chown", "chmod", "printf"):
        os.symlink("busybox", root / "bin" / c)
    (root / "data/key.txt").write_text("the answer key\n")
    (root / "data/inside.txt").write_text("the container's own file\n")
    (root / "tests/test_answer.sh").write_text("#!/bin/sh\necho grading\n")
    (root / "grader").mkdir()
    # A link to the workdir: a grader root named through it is still inside the workdir.
    os.symlink("work", root / "jobs")
    (root / "grader/expected.txt").write_text("the grader's expected output\n")
    return root


@pytest.fixture(scope="session")
def rootfs_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("image")
    root = _rootfs(tmp)
    tar = tmp / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(root, arcname=".")
    return tar


def _import(engine: str, tar: Path) -> None:
    with open(tar, "rb") as f:
        subprocess.run([engine, "import", "-", IMAGE], stdin=f, check=True, capture_output=True)


@pytest.fixture(scope="session")
def docker_image(rootfs_tar: Path) -> str:
    _import("docker", rootfs_tar)
    return IMAGE


@pytest.fixture(scope="session")
def podman_image(rootfs_tar: Path) -> str:
    _import("podman", rootfs_tar)
    return PODMAN_IMAGE


@pytest.fixture(params=["docker", "podman"])
def engine_image(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """Each engine with its image."""
    image = request.getfixturevalue("docker_image" if request.param == "docker" else "podman_image")
    yield request.param, image


def write_policy(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    """Reading the container's answer key is a cheat in `agent`; `grading` may read the tests,
    and a write of the results is the agent's cheat there."""
    return write_policy(tmp_path / "policy.toml", """
[cheats]
answer_key = '^/data/key\\.txt$'
tests = '^/tests/'

[phases.grading.cheats]
results_written = { pattern = '^/data/results', access = ["write"] }
""")


def exec_rows(result: aet.RunResult) -> list[dict[str, object]]:
    t = result.table()
    return [r for r in t.select(["pid", "kind", "argv", "ret", "phase"]).to_pylist()
            if r["kind"] == "exec" and r["ret"] == 0]


def opens(result: aet.RunResult, path: str) -> list[dict[str, object]]:
    t = result.table()
    return [r for r in t.select(["pid", "kind", "resolved_path", "flags", "ret", "comm", "phase"]).to_pylist()
            if r["kind"] == "open" and r["resolved_path"] == path and (r["ret"] or 0) >= 0]


def engine_has(engine: str, name: str) -> bool:
    p = subprocess.run([engine, "ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}"],
                       capture_output=True, text=True)
    return name in p.stdout.split()
