"""Finding and calling the ``aet`` binary."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Optional, Sequence

from .errors import AetError, AetNotFound


def aet_binary() -> str:
    """The ``aet`` binary: ``$AET_BIN`` when set, else ``aet`` on ``PATH``."""
    env = os.environ.get("AET_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise AetNotFound(f"AET_BIN={env} is not an executable file")
        return env
    found = shutil.which("aet")
    if found is None:
        raise AetNotFound(
            "no aet binary: put aet on PATH or set AET_BIN (cargo xtask build prints its path)"
        )
    return found


def aet_messages(stderr: str) -> str:
    """aet's own error lines of a stderr (``aet: error: ...`` and what follows them), else its
    last lines: the message an exception carries."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if line.startswith("aet: error") or "INCOMPLETE" in line
              or "NOT AS SPECIFIED" in line]
    if errors:
        return "\n".join(lines[errors[0]:])
    return "\n".join(lines[-5:]) if lines else "(aet printed nothing)"


def call(args: Sequence[str], *, input: Optional[bytes] = None, timeout: Optional[float] = None,
         ok: Sequence[int] = (0,)) -> subprocess.CompletedProcess[bytes]:
    """Runs ``aet ARGS``; an exit status outside ``ok`` raises :class:`AetError` with aet's
    message."""
    argv = [aet_binary(), *args]
    p = subprocess.run(argv, input=input, capture_output=True, timeout=timeout)
    if p.returncode not in ok:
        raise AetError(aet_messages(p.stderr.decode(errors="replace")), p.returncode, argv)
    return p
