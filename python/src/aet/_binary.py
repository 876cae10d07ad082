"""Finding and calling the ``aet`` binary."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional, Sequence

from .errors import AetError, AetNotFound


def aet_binary() -> str:
    """The ``aet`` binary: ``$AET_BIN`` when set; else the one installed with this package (the
    wheel puts it beside the package, with a launcher in the environment's scripts directory,
    which need not be on ``PATH``); else ``aet`` on ``PATH``."""
    env = os.environ.get("AET_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise AetNotFound(f"AET_BIN={env} is not an executable file")
        return env
    found = installed_binary() or shutil.which("aet")
    if found is None:
        raise AetNotFound(
            "no aet binary: install the aet wheel (cargo xtask dist builds it), put aet on PATH "
            "or set AET_BIN (cargo xtask build prints its path)"
        )
    return found


def installed_binary() -> Optional[str]:
    """The ``aet`` binary the installed distribution ``aet`` lists in its ``RECORD``, when that
    distribution is this very package (not another copy of it elsewhere on ``sys.path``), else
    ``None`` (a source checkout, or a package installed without the binary)."""
    try:
        dist = importlib.metadata.distribution("aet")
    except importlib.metadata.PackageNotFoundError:
        return None
    here = Path(__file__).resolve().parent
    if Path(str(dist.locate_file("aet/__init__.py"))).resolve().parent != here:
        return None
    # The wheel (maturin's `bindings = "bin"`) puts the binary in `aet.scripts/` beside the
    # package and a Python launcher that execs it in the scripts directory: the binary itself
    # first, which saves a Python start per call.
    found = [f for f in dist.files or [] if f.name == "aet"
             and f.parent.name in ("aet.scripts", "bin", "scripts")]
    found.sort(key=lambda f: f.parent.name != "aet.scripts")
    for f in found:
        path = Path(str(dist.locate_file(f))).resolve()
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


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
