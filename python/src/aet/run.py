"""``aet.run``: one command recorded (and audited) by ``aet run``."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from ._binary import aet_binary, aet_messages
from .errors import AetFailedError, InconclusiveError, RefusedError, RunTimeout, ShipError
from .result import LEDGER, PathLike, RunResult

Identity = Union[bool, str, int, None]


def run_args(
    out: PathLike,
    *,
    policy: Optional[PathLike] = None,
    sandbox: Optional[PathLike] = None,
    identity: Identity = None,
    mode: Optional[str] = None,
    sign: Optional[PathLike] = None,
    daemon: Optional[bool] = None,
    grace: Optional[float] = None,
    ship: Optional[str] = None,
    quiet: bool = True,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``aet run`` options (before ``--``) these arguments stand for."""
    a = ["run", "--out", os.fspath(out), "--progress", "none"]
    if quiet:
        a.append("-q")
    if policy is not None:
        a += ["--policy", os.fspath(policy)]
    if sandbox is not None:
        a += ["--sandbox", os.fspath(sandbox)]
    if identity is True:
        a.append("--identity")
    elif identity not in (None, False):
        a.append(f"--identity={identity}")
    if mode is not None:
        if mode not in ("record", "shadow", "enforce"):
            raise ValueError(f"mode {mode!r}: expected 'record', 'shadow' or 'enforce'")
        a += ["--mode", mode]
    if sign is not None:
        a += ["--sign", os.fspath(sign)]
    if daemon is True:
        a.append("--daemon")
    elif daemon is False:
        a.append("--standalone")
    if grace is not None:
        a += ["--grace", str(grace)]
    if ship is not None:
        a += ["--ship", ship]
    a += list(extra)
    return a


#: ``aet``'s exit code when the run could not be shipped to object storage.
SHIP_FAILED = 124


def outcome(out: Path, returncode: int, stderr: str, argv: list[str], check: bool,
            existed: bool = False) -> RunResult:
    """What ``aet run`` left in ``out``, or the exception that says why it left nothing usable
    (``existed``: ``out`` held a ledger before, which aet refuses to overwrite)."""
    if existed or not (out / LEDGER).exists():
        raise RefusedError(aet_messages(stderr), returncode, argv)
    result = RunResult.load(out, stderr)
    if returncode == SHIP_FAILED and "the run was not shipped" in stderr:
        raise ShipError(aet_messages(stderr), result, returncode, argv)
    own_failure = returncode == 125 and "aet: error" in stderr and result.exit_status != 125
    if result.exit_status is None or own_failure:
        raise AetFailedError(aet_messages(stderr), returncode, argv, result)
    if check and not result.complete:
        raise InconclusiveError(
            "the record is incomplete: " + "; ".join(result.reasons), result, returncode
        )
    return result


def default_out() -> Path:
    """A new run directory ``runs/<UTC time>-<random>`` under the current directory: where
    :func:`run` writes without ``out`` (as ``aet run`` without ``--out`` does, and never one an
    earlier run of the same second holds)."""
    runs = Path("runs")
    runs.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path(tempfile.mkdtemp(prefix=f"{stamp}-", dir=runs))


def run(
    argv: Sequence[str],
    *,
    out: Optional[PathLike] = None,
    policy: Optional[PathLike] = None,
    sandbox: Optional[PathLike] = None,
    identity: Identity = None,
    mode: Optional[str] = None,
    sign: Optional[PathLike] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
    cwd: Optional[PathLike] = None,
    input: Optional[bytes] = None,
    daemon: Optional[bool] = None,
    grace: Optional[float] = None,
    ship: Optional[str] = None,
    check: bool = True,
    aet_args: Sequence[str] = (),
) -> RunResult:
    """Runs ``argv`` under ``aet run`` into the run directory ``out`` (which must not hold a
    ledger; default: a new :func:`default_out`) and returns the finished run: its exit status, completeness, and with ``policy``
    the audit's verdict and findings. ``identity``: ``True`` for aet's agent identity, or
    ``"UID"``/``"UID:GID"``. ``daemon``: ``True`` requires a resident ``aet daemon``,
    ``False`` loads the programs for this run (seconds of verification), ``None`` uses the
    daemon at ``$AET_SOCKET`` and, when none answers, starts one that serves later runs until it
    is idle (``$AET_DAEMON=never`` makes ``None`` load the programs instead). ``ship``: an
    ``s3://BUCKET/PREFIX`` the finished run is sent to (``aet run --ship``; credentials from
    ``AWS_*`` or the AWS profile).

    Raises :class:`RefusedError` when aet refused to start (nothing ran),
    :class:`AetFailedError` when aet failed once started, :class:`ShipError` when the run is
    whole locally but could not be shipped, :class:`InconclusiveError` when the
    record is incomplete (unless ``check=False``), :class:`RunTimeout` after ``timeout``
    seconds. The command's own failure is not an exception: see ``exit_status``."""
    if not argv:
        raise ValueError("argv is empty: nothing to run")
    outp = Path(out) if out is not None else default_out()
    cmd = [aet_binary(), *run_args(outp, policy=policy, sandbox=sandbox, identity=identity,
                                   mode=mode, sign=sign, daemon=daemon, grace=grace,
                                   ship=ship, extra=aet_args), "--", *argv]
    existed = (outp / LEDGER).exists()
    full_env = None if env is None else {**os.environ, **env}
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env,
                         cwd=None if cwd is None else os.fspath(cwd))
    try:
        stdout, stderr = p.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        # aet forwards SIGTERM to the command, kills the rest of the run, finishes the ledger.
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate()
        text = stderr.decode(errors="replace")
        result = RunResult.load(outp, text) if not existed and (outp / LEDGER).exists() else None
        raise RunTimeout(f"the run did not end within {timeout} s: stopped", result)
    text = stderr.decode(errors="replace")
    result = outcome(outp, p.returncode, text, cmd, check, existed)
    result.stdout = stdout
    return result
