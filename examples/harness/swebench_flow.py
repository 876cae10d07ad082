"""A SWE-bench-shaped harness on the Docker SDK, recorded by aet.

The harness creates the task's container itself (``containers.run``), sends the agent's
commands one by one (``exec_run``), marks the ``grading`` phase, uploads and runs the tests in
the same container, and removes it. aet records the container from its first exec (its cgroup
parent is the run's), judges the agent's phase and the grader's apart, and audits the run.

    python examples/harness/swebench_flow.py --image IMAGE --out runs/task-1
"""

from __future__ import annotations

import argparse
import io
import tarfile
from pathlib import Path

import docker

import aet

HERE = Path(__file__).resolve().parent

#: What a scripted "agent" does in the container.
AGENT_COMMANDS = [
    ["sh", "-c", "mkdir -p /work && echo 'def add(a, b): return a + b' > /work/fix.py"],
    ["cat", "/work/fix.py"],
]

TESTS = {"tests/run.sh": b"#!/bin/sh\ngrep -q 'a + b' /work/fix.py && echo '1 passed'\n"}


def tests_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in TESTS.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--policy", default=str(HERE / "policy.toml"))
    a = ap.parse_args()

    client = docker.from_env()
    # defer_watch: the policy's watched files are the container's, fingerprinted by run.watch.
    with aet.recorded_run(a.out, policy=a.policy, defer_watch=True) as run:
        c = client.containers.run(a.image, ["sleep", "infinity"], detach=True,
                                  working_dir="/work", cgroup_parent=run.cgroup_parent)
        try:
            c.reload()
            pid = c.attrs["State"]["Pid"]
            run.keep(pid)  # the container's init stays into grading
            run.watch(pid)  # fingerprinted before the agent's first command (at its /work)
            for cmd in AGENT_COMMANDS:
                code, out = c.exec_run(cmd)
                print(f"agent $ {' '.join(cmd)} -> {code}")
            # Everything from here on is the grader's: judged by [phases.grading], and what it
            # loads that the agent wrote is named by provenance.
            run.grading()
            c.put_archive("/", tests_archive())
            code, out = c.exec_run(["sh", "/tests/run.sh"])
            print(f"tests -> {code}: {out.decode().strip()}")
        finally:
            c.remove(force=True)
    r = run.result
    assert r is not None
    print(f"verdict {r.verdict}, record {'complete' if r.complete else 'INCOMPLETE'}, "
          f"report {r.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
