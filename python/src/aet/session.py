"""A recorded run held open while a harness works: ``aet run`` around a keeper process, so
that containers started with its cgroup parent are recorded from their first exec, phases can
be marked, and the run is finished (and audited) when the harness says so."""

from __future__ import annotations

import os
import select
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Iterable, Optional, Sequence, Type

from ._binary import aet_binary, aet_messages, call
from .errors import AetError, RefusedError
from .result import LEDGER, PathLike, RunResult
from .run import outcome, run_args

# The run's command: prints its cgroup (relative to the cgroup v2 root, as `--cgroup-parent`
# takes it), then waits for the harness to close its stdin.
KEEPER = ["sh", "-c", 'echo "$AET_CGROUP"; exec cat >/dev/null']

#: How long ``aet run`` may take to attach the monitor and start the keeper.
START_LIMIT = 60.0


class RecordedRun:
    """A run held open: :meth:`start` it, give :attr:`cgroup_parent` to the containers the
    harness starts (the Docker SDK's ``containers.run(cgroup_parent=...)``, ``docker run
    --cgroup-parent``), mark :meth:`phase`\\ s, and :meth:`finish` it (or use it as a context
    manager). :attr:`result` is then the finished run."""

    def __init__(
        self,
        out: PathLike,
        *,
        policy: Optional[PathLike] = None,
        mode: Optional[str] = None,
        sign: Optional[PathLike] = None,
        daemon: Optional[bool] = None,
        grace: Optional[float] = None,
        ship: Optional[str] = None,
        defer_watch: bool = False,
        aet_args: Sequence[str] = (),
    ) -> None:
        self.out = Path(out)
        extra = list(aet_args)
        #: Whether the watched files wait for :meth:`watch` (``defer_watch`` with a policy).
        self.defers_watch = defer_watch and policy is not None
        if self.defers_watch:
            extra.append("--defer-watch")
        self._args = run_args(self.out, policy=policy, mode=mode, sign=sign, daemon=daemon,
                              grace=grace, ship=ship, extra=extra)
        self._phased = False
        #: The phases this run has begun, in order (``agent`` is every run's first).
        self.phases: list[str] = []
        self._watching = False
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._stderr: Optional[tempfile._TemporaryFileWrapper[bytes]] = None
        self.cgroup_parent: Optional[str] = None
        self.result: Optional[RunResult] = None
        self._keep: list[int] = []
        self._existed = False

    @property
    def argv(self) -> list[str]:
        """The ``aet run`` command line of the run."""
        return [aet_binary(), *self._args, "--", *KEEPER]

    def start(self) -> "RecordedRun":
        """Starts ``aet run`` and waits until the monitor records the run. Raises
        :class:`RefusedError` with aet's message when it does not start."""
        if self._proc is not None:
            raise AetError("the run is already started")
        self._existed = (self.out / LEDGER).exists()
        self._stderr = tempfile.NamedTemporaryFile(prefix="aet-stderr-")
        argv = self.argv
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr)
        assert self._proc.stdout is not None
        line = b""
        deadline = time.monotonic() + START_LIMIT
        fd = self._proc.stdout.fileno()
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._proc.kill()
                self._proc.wait()
                raise RefusedError(f"aet run did not start within {START_LIMIT:.0f} s: "
                                   + self._stderr_text(), None, argv)
            chunk = os.read(fd, 4096)
            if not chunk:
                code = self._proc.wait()
                raise RefusedError(aet_messages(self._stderr_text()), code, argv)
            line += chunk
        self.cgroup_parent = line.decode().strip()
        return self

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    @property
    def running(self) -> bool:
        """Whether ``aet run`` is still going."""
        return self._proc is not None and self._proc.poll() is None

    def keep(self, pid: int) -> None:
        """A process of the harness's own (a container's init) that may stay alive into every
        later phase without a finding."""
        self._keep.append(pid)

    def phase(self, name: str, keep: Iterable[int] = ()) -> None:
        """Begins phase ``name`` (the run starts in ``agent``): rows from now on are its own, the
        policy's ``[phases.NAME]`` judges them, and a process of an earlier phase still alive or
        acting in it is a finding, except ``keep`` and those given to :meth:`keep`."""
        if not self.running:
            raise AetError(f"{self.out}: the run is not in progress")
        args = ["phase", os.fspath(self.out), name]
        for pid in [*self._keep, *keep]:
            args += ["--keep", str(pid)]
        call(args)
        self._phased = True
        self.phases.append(name)

    def grading(self, name: str = "grading", keep: Iterable[int] = ()) -> None:
        """Begins the grading phase (``name``), unless the run is in it already: call it before
        the harness uploads and runs the tests."""
        if name not in self.phases:
            self.phase(name, keep)

    def watch(self, pid: int, repo: Optional[str] = None) -> None:
        """The policy's watched files are seen from process ``pid``'s view (a container's
        init): they are fingerprinted now, before the agent's first instruction there, with
        relative globs at ``repo`` (default: that process's working directory). Needs
        ``defer_watch=True``. Raises :class:`AetError` with aet's message when they cannot be
        (a limit of the policy's, a process that is not the run's)."""
        if not self.running:
            raise AetError(f"{self.out}: the run is not in progress")
        args = ["watch", os.fspath(self.out), "--root", str(pid)]
        if repo is not None:
            args += ["--repo", repo]
        call(args)
        self._watching = True

    def end_watch(self) -> None:
        """The agent's phase is over: its watched files are fingerprinted again now (what
        :meth:`phase` does). Call it before removing the container when no phase is marked."""
        if self._watching and not self._phased and self.running:
            call(["watch", os.fspath(self.out), "--end"])
            self._phased = True

    def finish(self, check: bool = True) -> RunResult:
        """Ends the run (its keeper exits; what is left of the run is killed after aet's grace),
        waits for the ledger and the audit, and returns the run."""
        if self.result is not None:
            return self.result
        if self._proc is None:
            raise AetError("the run was never started")
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.close()
        except BrokenPipeError:
            pass
        code = self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        text = self._stderr_text()
        if self._stderr is not None:
            self._stderr.close()
        self.result = outcome(self.out, code, text, self.argv, check, self._existed)
        return self.result

    def __enter__(self) -> "RecordedRun":
        return self.start()

    def __exit__(self, et: Optional[Type[BaseException]], e: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        # An exception of the block is the one the harness sees; the run is finished anyway.
        self.finish(check=et is None)


#: A :class:`RecordedRun` for harnesses that start containers themselves (the Docker SDK's
#: ``containers.run(cgroup_parent=run.cgroup_parent)``)::
#:
#:     with aet.recorded_run("runs/task-1", policy="policy.toml") as r:
#:         c = client.containers.run(image, "sleep infinity", detach=True,
#:                                   cgroup_parent=r.cgroup_parent)
#:         c.reload()
#:         r.keep(c.attrs["State"]["Pid"])
#:         ...  # the agent's commands: c.exec_run(...)
#:         r.phase("grading")
#:         ...  # the tests
#:         c.remove(force=True)
#:     print(r.result.verdict)
recorded_run = RecordedRun
