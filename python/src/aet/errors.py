"""The errors of aet's Python API: each carries aet's own message and exit code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .result import RunResult


class AetError(Exception):
    """Something aet said went wrong. ``message`` is aet's own text (its ``aet: error`` lines),
    ``exit_code`` the exit status of the ``aet`` command that said it."""

    def __init__(self, message: str, exit_code: Optional[int] = None, command: Optional[list[str]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.command = command or []

    def __str__(self) -> str:
        code = "" if self.exit_code is None else f" (exit {self.exit_code})"
        return f"{self.message}{code}"


class AetNotFound(AetError):
    """No ``aet`` binary: neither ``$AET_BIN``, nor one installed with this package (the wheel's),
    nor ``aet`` on ``PATH``."""


class RefusedError(AetError):
    """aet refused the run before it started (bad arguments, a malformed policy or spec, a
    runtime it cannot see into): nothing ran, no ledger was written."""


class AetFailedError(AetError):
    """aet failed once the run had started (the monitor could not attach, the sandbox or
    identity was not as specified, the ledger could not be written). ``result`` is what the
    run directory holds, when it holds a ledger."""

    def __init__(self, message: str, exit_code: Optional[int] = None, command: Optional[list[str]] = None,
                 result: Optional[RunResult] = None) -> None:
        super().__init__(message, exit_code, command)
        self.result = result


class ShipError(AetError):
    """The run finished and is whole in its local directory, but could not be shipped to object
    storage (``ship=``; ``aet`` exit 124): ``result`` is the local run; ``aet ship DIR URL`` (or
    :func:`aet.ship`) sends it again."""

    def __init__(self, message: str, result: RunResult, exit_code: Optional[int] = None,
                 command: Optional[list[str]] = None) -> None:
        super().__init__(message, exit_code, command)
        self.result = result


class InconclusiveError(AetError):
    """The record is incomplete (events lost, work handed outside the run, ...): it cannot
    prove what the run touched. ``result`` holds the run; ``reasons`` say why."""

    def __init__(self, message: str, result: RunResult, exit_code: Optional[int] = None) -> None:
        super().__init__(message, exit_code)
        self.result = result
        self.reasons = result.reasons


class ContainerError(AetError):
    """The container runtime failed (the container could not be created or started, an exec
    could not be sent). The run it was recorded in is finished before this is raised."""


class UnsupportedRuntimeError(RefusedError):
    """A container runtime whose processes the host kernel does not run as such (gVisor's
    ``runsc``, Kata's VMs): aet would see the sandbox's kernel, not the agent."""


class RunTimeout(AetError):
    """The run did not end within its timeout: aet was told to stop it (SIGTERM, forwarded to
    the command; the rest of the run is killed), and finished its ledger. ``result`` holds it."""

    def __init__(self, message: str, result: Optional[RunResult] = None) -> None:
        super().__init__(message, None)
        self.result = result
