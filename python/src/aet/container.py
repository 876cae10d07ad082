"""``aet.container``: a recorded container session (create, many execs, grade, stop), the unit
of work of SWE-bench's harness, OpenHands, Harbor and Inspect AI."""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from types import TracebackType
from typing import Mapping, NamedTuple, Optional, Sequence, Type, Union

from .errors import ContainerError, UnsupportedRuntimeError
from .isolation import Decoy
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


#: The agent identity's default uid and gid in the container (``identity=True``): the first of
#: the pool ``aet run --identity`` takes its uids from.
DEFAULT_AGENT_ID = 2000
#: Variables the agent gets from the container's environment (globs, as ``aet run
#: --identity``'s allow-list); everything else is dropped. ``HOME``, ``USER``, ``LOGNAME`` and
#: ``SHELL`` are set for the agent, not inherited.
AGENT_ENV_ALLOW = ("PATH", "LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM", "NO_COLOR", "TZ",
                   "TMPDIR", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
#: ``PATH`` when the container's environment has none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

AgentId = Union[None, bool, int, str]


def parse_identity(identity: AgentId) -> Optional[tuple[int, int]]:
    """``identity`` as ``(uid, gid)``: ``True`` for aet's default, an int uid, ``"UID"`` or
    ``"UID:GID"``; ``None``/``False`` for none. Root is refused."""
    if identity is None or identity is False:
        return None
    if identity is True:
        return (DEFAULT_AGENT_ID, DEFAULT_AGENT_ID)
    try:
        if isinstance(identity, int):
            uid, gid = identity, identity
        else:
            u, _, g = identity.partition(":")
            uid, gid = int(u), int(g or u)
    except ValueError:
        raise ValueError(f"identity {identity!r}: expected True, UID or 'UID:GID'") from None
    if uid <= 0 or gid <= 0:
        raise ValueError(f"identity {identity!r}: the agent's uid and gid must not be 0 (root)")
    return (uid, gid)


def agent_environment(container_env: Sequence[str], uid: int, home: str,
                      extra: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment: the allow-listed variables of the container's, ``HOME``,
    ``USER``, ``LOGNAME`` set for the agent, and ``extra`` (what the harness passes by name)."""
    import fnmatch

    env: dict[str, str] = {}
    for kv in container_env:
        k, sep, v = kv.partition("=")
        if sep and any(fnmatch.fnmatchcase(k.upper(), p) for p in AGENT_ENV_ALLOW):
            env[k] = v
    env.setdefault("PATH", DEFAULT_PATH)
    env.update({"HOME": home, "USER": str(uid), "LOGNAME": str(uid)})
    env.update(extra)
    return env


def _status_fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    return out


def check_probe(status: str, environ: str, uid: int, gid: int,
                env: Mapping[str, str]) -> tuple[dict[str, object], list[str]]:
    """What the agent identity's probe (``/proc/self/status`` and ``/proc/self/environ`` read
    as the agent) shows, and what is wrong with it."""
    st = _status_fields(status)
    facts: dict[str, object] = {}
    wrong: list[str] = []
    uids = st.get("Uid", "").split()
    gids = st.get("Gid", "").split()
    facts["uid"] = [int(x) for x in uids if x.isdigit()]
    facts["gid"] = [int(x) for x in gids if x.isdigit()]
    if not uids or any(int(x) != uid for x in uids):
        wrong.append(f"uids {st.get('Uid', '?')}, not {uid}")
    if not gids or any(int(x) != gid for x in gids):
        wrong.append(f"gids {st.get('Gid', '?')}, not {gid}")
    groups = st.get("Groups", "").split()
    facts["groups"] = [int(x) for x in groups if x.isdigit()]
    if any(int(x) in (0,) for x in groups if x.isdigit()):
        wrong.append(f"supplementary groups {st.get('Groups')} include root's")
    for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        v = st.get(cap)
        facts[cap] = v
        if v is not None and int(v, 16) != 0:
            wrong.append(f"{cap} {v}: the agent has capabilities")
        if v is None and cap != "CapAmb":
            wrong.append(f"{cap} missing from /proc/self/status")
    nnp = st.get("NoNewPrivs")
    facts["no_new_privs"] = nnp == "1"
    if nnp != "1":
        wrong.append(f"NoNewPrivs {nnp}: the agent could gain privileges (setuid programs)")
    seen = sorted(kv.partition("=")[0] for kv in environ.split("\0") if kv)
    facts["env"] = seen
    extra = [k for k in seen if k not in env]
    if extra:
        wrong.append(f"environment has variables not given to the agent: {', '.join(extra)}")
    return facts, wrong


class Container:
    """A container recorded from its first exec: the run is ``aet run`` around a keeper, the
    container's cgroup is inside the run's, every exec's processes are the run's. Use as a
    context manager (:func:`container`); on leaving the block the container is removed, the
    run finished and audited, and :attr:`result` is the run.

    ``identity``: run the agent's commands (:meth:`exec`, :meth:`write_file`,
    :meth:`read_file`) as an unprivileged uid and gid (``True`` for aet's default, 2000; a uid;
    ``"UID:GID"``), as ``aet run --identity`` does on the host: the container made with
    ``no-new-privileges``, the ``workdir`` handed over to the agent, each command under ``env
    -i`` with the allow-listed variables of the container's environment (and ``agent_env``),
    and before the first command a probe as the agent that must show its uid and gid, no
    capabilities, ``NoNewPrivs`` and no variable it was not given. ``grader_root``: a directory
    of the container the agent must not reach: checked (or with ``fix_grader_root`` made)
    root's and 0700, outside the ``workdir``, and listed as the agent, which must be refused.
    :meth:`grade` runs as the container's own user. Any check that fails raises
    :class:`ContainerError` naming it, after the run is finished: nothing runs as an agent
    identity that is not as specified. What the checks saw is :attr:`identity_facts`, and
    ``container-identity.json`` in the run directory."""

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
        identity: AgentId = None,
        grader_root: Optional[str] = None,
        fix_grader_root: bool = False,
        agent_env: Optional[Mapping[str, str]] = None,
        decoys: Sequence[Decoy] = (),
    ) -> None:
        self.agent = parse_identity(identity)
        if grader_root is not None and self.agent is None:
            raise ValueError("grader_root protects grading material from an agent identity: "
                             "give identity= too")
        if grader_root is not None and not grader_root.startswith("/"):
            raise ValueError(f"grader_root {grader_root!r}: not an absolute path")
        self.grader_root = grader_root
        self.fix_grader_root = fix_grader_root
        self.agent_env = dict(agent_env or {})
        self._agent_environ: dict[str, str] = {}
        #: What the agent identity's checks saw (``None`` without an identity).
        self.identity_facts: Optional[dict[str, object]] = None
        self.image = image
        self.engine = engine
        self.oci_runtime = oci_runtime
        self.name = name or f"aet-{uuid.uuid4().hex[:12]}"
        self.command = list(command)
        self.user = user
        self.workdir = workdir
        self.env = dict(env or {})
        self.create_args = list(create_args)
        # Decoys: aet plants them for this run (`aet run --decoys`), the container gets them
        # bound read-only at their paths and their variables set (docs/sandbox.md "Decoys").
        self._decoys_file: Optional[Path] = None
        if decoys:
            fd, name = tempfile.mkstemp(prefix="aet-decoys-", suffix=".toml")
            with os.fdopen(fd, "w") as f:
                f.write("".join(d.to_toml() for d in decoys))
            self._decoys_file = Path(name)
            aet_args = [*aet_args, "--decoys", name]
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
        if self.agent is not None:
            argv += ["--security-opt", "no-new-privileges"]
        argv += self._decoy_args()
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
        if self.agent is not None:
            try:
                self._set_up_agent(*self.agent)
            except Exception:
                self.close(check=False)
                raise
        return self

    def _decoy_args(self) -> list[str]:
        """The engine's options that put the run's decoys in the container (read-only binds of
        what aet planted, the variables), from the run's ``decoys.json``."""
        if self._decoys_file is None:
            return []
        self._decoys_file.unlink(missing_ok=True)
        placement = json.loads((self.out / "decoys.json").read_text())
        args: list[str] = []
        for b in placement["binds"]:
            args += ["--volume", f"{b['source']}:{b['target']}:ro"]
        for k, v in placement["env"].items():
            args += ["--env", f"{k}={v}"]
        return args

    def _set_up_agent(self, uid: int, gid: int) -> None:
        """Hands the workdir over, checks the grader root, and probes the identity as the
        agent; raises :class:`ContainerError` naming what is not as specified."""
        env = subprocess.run([self.engine, "inspect", "--format", "{{json .Config.Env}}",
                              self.name], capture_output=True)
        container_env = json.loads(env.stdout or b"null") if env.returncode == 0 else False
        if container_env is None:
            container_env = []  # an image without ENV, a container without --env
        if not isinstance(container_env, list):
            raise ContainerError(f"{self.engine} did not say the container's environment: the "
                                 "agent's cannot be made from it")
        home = self.workdir or "/tmp"
        self._agent_environ = agent_environment(container_env, uid, home, self.agent_env)
        facts: dict[str, object] = {"uid": uid, "gid": gid, "home": home,
                                    "no_new_privileges": "container"}
        if self.workdir:
            r = self._exec(["chown", "-hR", f"{uid}:{gid}", self.workdir], user="0:0")
            if r.exit_status != 0:
                raise ContainerError(f"cannot hand {self.workdir} over to the agent: "
                                     + r.stderr.decode(errors="replace").strip(), r.exit_status)
            facts["handed_over"] = self.workdir
        if self.grader_root is not None:
            facts["grader_root"] = self._check_grader_root(self.grader_root)
        # Each file read by a program the agent runs directly (a shell would add its own
        # variables to what it runs).
        seen = []
        for f in ("/proc/self/status", "/proc/self/environ"):
            r = self.exec(["cat", f])
            if r.exit_status != 0:
                raise ContainerError("the agent identity's probe failed: "
                                     + r.stderr.decode(errors="replace").strip(), r.exit_status)
            seen.append(r.stdout.decode(errors="replace"))
        probe, wrong = check_probe(seen[0], seen[1], uid, gid, self._agent_environ)
        facts["probe"] = probe
        if self.grader_root is not None:
            g = self.exec(["ls", "-a", self.grader_root])
            facts["grader_root_listed_by_agent"] = g.exit_status == 0
            if g.exit_status == 0:
                wrong.append(f"the agent can list the grader root {self.grader_root}")
        self.identity_facts = facts
        (self.out / "container-identity.json").write_text(json.dumps(facts, indent=2) + "\n")
        if wrong:
            raise ContainerError("the agent identity is not as specified: " + "; ".join(wrong))

    def _physical(self, path: str) -> Optional[str]:
        """The directory ``path`` as the container resolves it, every link followed (the
        shell's own ``cd -P``, so no tool of the image is needed); ``None`` when it is no
        directory there."""
        r = self._exec(["sh", "-c", 'cd -P -- "$1" && pwd -P', "sh", path], user="0:0")
        out = r.stdout.decode(errors="replace").strip()
        return out if r.exit_status == 0 and out.startswith("/") else None

    def _check_grader_root(self, path: str) -> dict[str, object]:
        """The grader root checked (as the container's root): a directory, not a link, outside
        the workdir, root's and 0700 (made so with ``fix_grader_root``)."""
        def err(problem: str) -> ContainerError:
            return ContainerError(f"grader root {path}: {problem}")

        norm = posixpath.normpath(path)
        if self.workdir:
            # As written and as the container resolves them: a link in either path's parents
            # (``/jobs -> /work``) cannot put the grader root inside what the agent is granted.
            real, wreal = self._physical(path), self._physical(self.workdir)
            for g, w in ((norm, posixpath.normpath(self.workdir)), (real, wreal)):
                if g is None or w is None:
                    continue
                via = "" if (g, w) == (norm, posixpath.normpath(self.workdir)) else \
                    f" (resolved: {g} and {w})"
                if g == w or g.startswith(w.rstrip("/") + "/"):
                    raise err(f"is inside {self.workdir}, which the agent is granted{via}")
                if w.startswith(g.rstrip("/") + "/"):
                    raise err(f"contains {self.workdir}, which the agent is granted{via}")
        r = self._exec(["ls", "-ldn", path], user="0:0")
        if r.exit_status != 0:
            raise err(r.stderr.decode(errors="replace").strip() or "cannot be listed")
        fields = r.stdout.decode(errors="replace").split()
        perms, owner = (fields[0], fields[2]) if len(fields) > 2 else ("?", "?")
        if perms.startswith("l"):
            raise err("is a symbolic link; name the directory itself")
        if not perms.startswith("d"):
            raise err("is not a directory")
        wrong = []
        if owner != "0":
            wrong.append(f"owned by uid {owner}, not root")
        if perms[4:10] != "------":
            wrong.append(f"mode {perms}, not drwx------")
        if not wrong:
            return {"path": path, "fixed": None}
        if not self.fix_grader_root:
            raise err(", ".join(wrong) + " (fix it, or pass fix_grader_root=True)")
        fix = self._exec(["sh", "-c", 'chown 0:0 "$1" && chmod 700 "$1"', "sh", path],
                         user="0:0")
        if fix.exit_status != 0:
            raise err("cannot be made root's and 0700: "
                      + fix.stderr.decode(errors="replace").strip())
        return {"path": path, "fixed": f"was {', '.join(wrong)}; now root's, 0700"}

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
        """Runs ``argv`` in the container (``docker exec``): its exit status, stdout and stderr;
        as the agent identity when the session has one and ``user`` is not given. Raises
        ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        if self.agent is not None and user is None:
            uid, gid = self.agent
            environ = {**self._agent_environ, **(env or {})}
            argv = ["env", "-i", *[f"{k}={v}" for k, v in environ.items()], *argv]
            return self._exec(argv, user=f"{uid}:{gid}", workdir=workdir, input=input,
                              timeout=timeout)
        return self._exec(argv, user=user, workdir=workdir, env=env, input=input,
                          timeout=timeout)

    def _exec(
        self,
        argv: Sequence[str],
        *,
        user: Optional[str] = None,
        workdir: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        input: Optional[Union[bytes, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
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

    def write_file(self, path: str, contents: Union[bytes, str], *,
                   user: Optional[str] = None) -> None:
        """Writes ``contents`` to ``path`` in the container (its directory made), by a process
        of the run: the write is in the ledger. ``IsADirectoryError`` for a directory,
        ``PermissionError`` when it cannot be written."""
        # Errors are told by exit status: Podman 4.3 loses a process's stderr about half the
        # time when it fails at once while its stdin is being written (measured: 23 of 40).
        r = self.exec(["sh", "-c", WRITE_SCRIPT, "sh", path], input=contents, user=user)
        if r.exit_status != 0:
            err = r.stderr.decode(errors="replace").strip()
            _raise_os_error(r.exit_status, err, path)
            raise ContainerError(f"cannot write {path} in the container: {err}", r.exit_status)

    def read_file(self, path: str, *, user: Optional[str] = None) -> bytes:
        """The bytes of ``path`` in the container; ``FileNotFoundError`` when there is none,
        ``IsADirectoryError`` for a directory, ``PermissionError`` when it cannot be read."""
        r = self.exec(["sh", "-c", READ_SCRIPT, "sh", path], user=user)
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
        """Runs the grader ``argv`` in the container (as :meth:`exec`, but as the container's
        own user, never the agent identity), in phase ``phase``,
        begun first if the run is not in it yet: the policy's ``[phases.grading]`` judges it,
        and provenance names what it loaded that the agent wrote."""
        if phase not in self.run.phases:
            self.phase(phase)
        return self._exec(argv, user=user, workdir=workdir, env=env, input=input,
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
