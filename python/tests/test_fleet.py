"""Runs shipped to object storage and read back through the package (``aet.run(ship=…)``,
``aet.ship``, ``aet.query(sql, "s3://…")``) against moto's S3 server; and the Kubernetes
manifests of dist/k8s and examples/k8s checked for the settings docs/fleet.md promises (they are
written from the documentation: no cluster runs them here)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

import aet

ROOT = Path(__file__).resolve().parents[2]
SECRET = "pyCanarySecret-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def s3(aet_bin: str) -> Iterator[str]:
    """A moto S3 server with a bucket ``pyruns``; the environment aet reads its endpoint and
    credentials from. Yields the endpoint."""
    server = shutil.which("moto_server")
    if server is None:
        pytest.fail("moto_server is not installed (cargo xtask setup installs moto[server])")
    port = _free_port()
    p = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(f"{endpoint}/pyruns", method="PUT"))
            break
        except OSError:
            if time.monotonic() > deadline:
                p.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.2)
    env = {"AWS_ACCESS_KEY_ID": "py-key", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AET_S3_RETRY_SECS": "2"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield endpoint
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        p.kill()
        p.wait()


def test_runs_shipped_from_python_are_queried_from_the_bucket(s3: str, tmp_path: Path) -> None:
    a = aet.run(["cat", "/etc/hostname"], out=tmp_path / "a", ship="s3://pyruns/sweep")
    aet.run(["true"], out=tmp_path / "b")
    aet.ship(tmp_path / "b", "s3://pyruns/sweep")
    assert a.exit_status == 0
    sql = "select run, count(*) as n from events group by run order by run"
    remote = aet.query(sql, "s3://pyruns/sweep/")
    local = aet.query(sql, [tmp_path / "a", tmp_path / "b"])
    assert remote.to_pylist() == local.to_pylist()
    assert remote.column("run").to_pylist() == ["a", "b"]


def test_a_failed_upload_raises_with_the_local_run(s3: str, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(aet.ShipError) as e:
        aet.run(["true"], out=tmp_path / "c", ship="s3://pyruns/sweep", env={"AWS_ENDPOINT_URL": dead})
    assert e.value.exit_code == 124
    assert e.value.result.complete and e.value.result.exit_status == 0
    assert SECRET not in str(e.value)
    assert str(tmp_path / "c") in str(e.value)
    with pytest.raises(aet.AetError) as f:
        aet.query("select 1", "s3://pyruns/nothing-here/")
    assert "no shipped run" in str(f.value)


def test_a_container_session_is_shipped_when_it_closes(
    s3: str, engine_image: tuple[str, str], tmp_path: Path
) -> None:
    engine, image = engine_image
    with aet.container(image, engine=engine, out=tmp_path / "box",
                       ship=f"s3://pyruns/containers-{engine}") as c:
        assert c.exec(["cat", "/etc/hostname"]).exit_status == 0
    remote = aet.query("select run, count(*) as n from events group by run", f"s3://pyruns/containers-{engine}/")
    local = aet.query("select run, count(*) as n from events group by run", tmp_path / "box")
    assert remote.to_pylist() == local.to_pylist()
    assert remote.column("run").to_pylist() == ["box"]


def _docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_daemonset_holds_what_the_docs_say() -> None:
    docs = _docs(ROOT / "dist/k8s/aet-daemonset.yaml")
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    c = pod["containers"][0]
    assert c["command"][:2] == ["aet", "daemon"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/sys/kernel/tracing", "/sys/fs/bpf", "/sys/fs/cgroup", "/sys/kernel/btf"} <= mounts
    cg = next(m for m in c["volumeMounts"] if m["mountPath"] == "/sys/fs/cgroup")
    assert not cg.get("readOnly", False), "runs are cgroups the daemon creates and freezes"
    sc = c["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"]["add"]) == {"BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE",
                                              "DAC_READ_SEARCH", "KILL"}
    assert sc["privileged"] is False
    assert pod["nodeSelector"] == {"aet.dev/recordable": "true"}


def test_the_sample_pod_waits_for_the_record_and_the_harness_refuses_opaque_runtimes() -> None:
    (pod,) = _docs(ROOT / "examples/k8s/sample-pod.yaml")
    gate = pod["spec"]["initContainers"][0]
    assert "aet.dev/recording" in " ".join(gate["command"])
    assert pod["spec"]["volumes"][0]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == \
        "metadata.annotations"
    import importlib.util
    spec = importlib.util.spec_from_file_location("record_pod", ROOT / "examples/k8s/record_pod.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for handler in ("runsc", "kata-qemu", "kata"):
        assert mod.OPAQUE.search(handler)
    assert not mod.OPAQUE.search("runc") and not mod.OPAQUE.search("crun")
    uid = "0b6a2a52-1f4e-4d43-9c77-3c1c2b1d8e10"
    assert mod.cgroup_candidates(uid, "BestEffort")[0] == (
        "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/"
        "kubepods-besteffort-pod0b6a2a52_1f4e_4d43_9c77_3c1c2b1d8e10.slice")
