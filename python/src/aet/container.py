"""``aet.container``: a recorded container session (create, many execs, grade, stop), the unit
of work of SWE-bench's harness, OpenHands, Harbor and Inspect AI."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from pathlib import Path
from types import TracebackType
from typing import Mapping, NamedTuple, Optional, Sequence, Type, Union

from .errors import ContainerError, UnsupportedRuntimeError
from .result import PathLike, RunResult
from .session import RecordedRun

#: OCI runtimes whose processes the host kernel does not run as such: gVisor's (a user-space
#: kernel) and Kata's (VMs). aet would record the sandbox's kernel, not the agent.
OPAQUE_RUNTIMES = re.compile(r"runsc|gvisor|kata", re.IGNORECASE)


class ExecResult(NamedTuple):
    """One exec's end: its exit status and output."""

    exit_status: int
    stdout: bytes
    stderr: bytes


def _engine_runtime(engine: str) -> str:
    """The OCI runtime the engine uses by default ('' when it cannot say)."""
    fmt = "{{.DefaultRuntime}}" if engine == "docker" else "{{.Host.OCIRuntime.Name}}"
    try:
        p = subprocess.run([engine, "info", "--format", fmt], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout.decode(errors="replace").strip() if p.returncode == 0 else ""


def check_runtime(engine: str, oci_runtime: Optional[str], create_args: Sequence[str] = ()) -> None:
    """Refuses (before anything starts) an engine aet cannot record through, or an OCI runtime
    whose processes the host kernel does not run as such."""
    if engine not in ("docker", "podman"):
        raise UnsupportedRuntimeError(f"container engine {engine!r}: aet records 'docker' or 'podman'")
    if shutil.which(engine) is None:
        raise UnsupportedRuntimeError(f"{engine} is not on PATH")
    named = [oci_runtime] if oci_runtime else []
    for i, a in enumerate(create_args):
        if a.startswith("--runtime="):
            named.append(a.split("=", 1)[1])
        elif a == "--runtime" and i + 1 < len(create_args):
            named.append(create_args[i + 1])
    chosen = named or [_engine_runtime(engine)]
    for r in chosen:
        if r and OPAQUE_RUNTIMES.search(r):
            raise UnsupportedRuntimeError(
                f"the OCI runtime {r!r} runs the container's processes under a kernel of its own "
                "(gVisor, Kata): the host's eBPF monitor would see that kernel, not the agent; "
                "use runc or crun"
            )


#: ``write_file``'s script: exit 21 (EISDIR) for a directory, 2 (ENOENT) when the directory
#: cannot be made, else ``cat``'s status. Its stdin is always read to its end.
WRITE_SCRIPT = (
    'if [ -d "$1" ]; then cat >/dev/null; exit 21; fi; '
    'mkdir -p "$(dirname "$1")" || { cat >/dev/null; exit 2; }; '
    'exec cat > "$1"'
)
#: ``read_file``'s script: exit 2 (ENOENT) when there is nothing, 21 (EISDIR) for a directory.
READ_SCRIPT = 'if [ -d "$1" ]; then exit 21; fi; if [ ! -e "$1" ]; then exit 2; fi; exec cat -- "$1"'


def _raise_os_error(status: int, err: str, path: str) -> None:
    """The ``OSError`` a failure inside the container stands for (what Inspect's sandboxes
    raise), if any: by the scripts' exit statuses, else by the tool's message."""
    text = err.lower()
    if status == 2 or "no such file" in text:
        raise FileNotFoundError(path)
    if status == 21 or "is a directory" in text:
        raise IsADirectoryError(path)
    if "permission denied" in text or "read-only file system" in text:
        raise PermissionError(path)


def _own_ulimits() -> list[str]:
    """``--ulimit`` options giving the container this process's own open-file and process
    limits (the process limit at most the kernel's ``pid_max``): Podman's defaults (about a
    million of each) are refused where the host's limits are lower (``error setting
    rlimit``)."""
    import resource

    try:
        with open("/proc/sys/kernel/pid_max") as f:
            pid_max = int(f.read())
    except (OSError, ValueError):
        pid_max = 32768
    out = []
    for name, which in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        soft, hard = resource.getrlimit(which)
        if soft == resource.RLIM_INFINITY or hard == resource.RLIM_INFINITY:
            continue
        if name == "nproc":
            soft, hard = min(soft, pid_max), min(hard, pid_max)
        out += ["--ulimit", f"{name}={soft}:{hard}"]
    return out


class Container:
    """A container recorded from its first exec: the run is ``aet run`` around a keeper, the
    container's cgroup is inside the run's, every exec's processes are the run's. Use as a
    context manager (:func:`container`); on leaving the block the container is removed, the
    run finished and audited, and :attr:`result` is the run."""

    def __init__(
        self,
        image: str,
        *,
        out: PathLike,
        policy: Optional[PathLike] = None,
        engine: str = "docker",
        oci_runtime: Optional[str] = None,
        name: Optional[str] = None,
        command: Sequence[str] = ("sleep", "infinity"),
        user: Optional[str] = None,
        workdir: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        mode: Optional[str] = None,
        sign: Optional[PathLike] = None,
        daemon: Optional[bool] = None,
        grace: Optional[float] = None,
        ship: Optional[str] = None,
        create_args: Sequence[str] = (),
        aet_args: Sequence[str] = (),
    ) -> None:
        self.image = image
        self.engine = engine
        self.oci_runtime = oci_runtime
        self.name = name or f"aet-{uuid.uuid4().hex[:12]}"
        self.command = list(command)
        self.user = user
        self.workdir = workdir
        self.env = dict(env or {})
        self.create_args = list(create_args)
        # The policy's watched files are those of the container's view: fingerprinted once it
        # runs, before the first exec.
        self.run = RecordedRun(out, policy=policy, mode=mode, sign=sign, daemon=daemon,
                               grace=grace, ship=ship, defer_watch=policy is not None,
                               aet_args=aet_args)
        self.init_pid: Optional[int] = None
        self.result: Optional[RunResult] = None
        self._started = False

    @property
    def out(self) -> Path:
        """The run directory."""
        return self.run.out

    def _engine(self) -> list[str]:
        # Podman places a container under a cgroup parent given as a path only with the
        # cgroupfs manager.
        return [self.engine, "--cgroup-manager", "cgroupfs"] if self.engine == "podman" else [self.engine]

    def start(self) -> "Container":
        """Starts the run, then the container inside it. A container that cannot start raises
        :class:`ContainerError` with the engine's message, after its run is finished."""
        check_runtime(self.engine, self.oci_runtime, self.create_args)
        self.run.start()
        argv = [*self._engine(), "run", "-d", "--name", self.name,
                f"--cgroup-parent={self.run.cgroup_parent}"]
        runtime = self.oci_runtime or ("runc" if self.engine == "podman" else None)
        if runtime:
            argv.append(f"--runtime={runtime}")
        if self.user:
            argv += ["--user", self.user]
        if self.workdir:
            argv += ["--workdir", self.workdir]
        for k, v in self.env.items():
            argv += ["--env", f"{k}={v}"]
        if self.engine == "podman" and not any(a.startswith("--ulimit") for a in self.create_args):
            argv += _own_ulimits()
        argv += [*self.create_args, self.image, *self.command]
        p = subprocess.run(argv, capture_output=True)
        if p.returncode != 0:
            self._remove()
            self.result = self.run.finish(check=False)
            raise ContainerError(
                f"{self.engine} could not start the container: "
                + p.stderr.decode(errors="replace").strip(), p.returncode, argv)
        self._started = True
        pid = subprocess.run([self.engine, "inspect", "--format", "{{.State.Pid}}", self.name],
                             capture_output=True)
        if pid.returncode == 0 and pid.stdout.strip().isdigit():
            self.init_pid = int(pid.stdout)
            self.run.keep(self.init_pid)
        if self.run.defers_watch:
            if self.init_pid is None:
                self.close(check=False)
                raise ContainerError(f"{self.engine} did not say the container's pid: its "
                                     "watched files cannot be fingerprinted")
            try:
                self.run.watch(self.init_pid, repo=self.workdir)
            except Exception:
                self.close(check=False)
                raise
        return self

    def exec(
        self,
        argv: Sequence[str],
        *,
        user: Optional[str] = None,
        workdir: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        input: Optional[Union[bytes, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        """Runs ``argv`` in the container (``docker exec``): its exit status, stdout and stderr.
        Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        if not self._started:
            raise ContainerError("the container is not running (start it, or use `with`)")
        cmd = [*self._engine(), "exec", "-i"]
        if user or self.user:
            cmd += ["--user", user or self.user or ""]
        if workdir or self.workdir:
            cmd += ["--workdir", workdir or self.workdir or ""]
        for k, v in (env or {}).items():
            cmd += ["--env", f"{k}={v}"]
        cmd += [self.name, *argv]
        data = input.encode() if isinstance(input, str) else input
        p = subprocess.run(cmd, input=data if data is not None else b"", capture_output=True,
                           timeout=timeout)
        return ExecResult(p.returncode, p.stdout, p.stderr)

    def write_file(self, path: str, contents: Union[bytes, str]) -> None:
        """Writes ``contents`` to ``path`` in the container (its directory made), by a process
        of the run: the write is in the ledger. ``IsADirectoryError`` for a directory,
        ``PermissionError`` when it cannot be written."""
        # Errors are told by exit status: Podman 4.3 loses a process's stderr about half the
        # time when it fails at once while its stdin is being written (measured: 23 of 40).
        r = self.exec(["sh", "-c", WRITE_SCRIPT, "sh", path], input=contents)
        if r.exit_status != 0:
            err = r.stderr.decode(errors="replace").strip()
            _raise_os_error(r.exit_status, err, path)
            raise ContainerError(f"cannot write {path} in the container: {err}", r.exit_status)

    def read_file(self, path: str) -> bytes:
        """The bytes of ``path`` in the container; ``FileNotFoundError`` when there is none,
        ``IsADirectoryError`` for a directory, ``PermissionError`` when it cannot be read."""
        r = self.exec(["sh", "-c", READ_SCRIPT, "sh", path])
        if r.exit_status != 0:
            err = r.stderr.decode(errors="replace").strip()
            _raise_os_error(r.exit_status, err, path)
            raise ContainerError(f"cannot read {path} in the container: {err}", r.exit_status)
        return r.stdout

    def phase(self, name: str) -> None:
        """Begins phase ``name`` of the run (``grading`` before the tests run); the container's
        init may stay alive into it."""
        self.run.phase(name)

    def grade(
        self,
        argv: Sequence[str],
        *,
        phase: str = "grading",
        user: Optional[str] = None,
        workdir: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        input: Optional[Union[bytes, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        """Runs the grader ``argv`` in the container (as :meth:`exec`), in phase ``phase``,
        begun first if the run is not in it yet: the policy's ``[phases.grading]`` judges it,
        and provenance names what it loaded that the agent wrote."""
        if phase not in self.run.phases:
            self.phase(phase)
        return self.exec(argv, user=user, workdir=workdir, env=env, input=input,
                         timeout=timeout)

    def _remove(self) -> None:
        subprocess.run([*self._engine(), "rm", "-f", self.name], capture_output=True)

    def close(self, check: bool = True) -> RunResult:
        """Removes the container, finishes the run and its audit."""
        if self.result is not None:
            return self.result
        if self._started:
            # Fingerprinted at the end of the agent's phase while the container still exists
            # (unless a phase marked it).
            self.run.end_watch()
            self._remove()
            self._started = False
        self.result = self.run.finish(check=check)
        return self.result

    def __enter__(self) -> "Container":
        return self.start()

    def __exit__(self, et: Optional[Type[BaseException]], e: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close(check=et is None)


#: A recorded container session (the options are :class:`Container`'s)::
#:
#:     with aet.container("python:3.11", out="runs/t1", policy="policy.toml") as c:
#:         c.write_file("/task/README", "...")
#:         status, stdout, stderr = c.exec(["python", "solve.py"], workdir="/task")
#:         c.phase("grading")
#:         c.exec(["pytest", "/task/tests"])
#:     print(c.result.verdict, c.result.report)
container = Container
