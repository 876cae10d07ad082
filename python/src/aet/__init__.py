"""aet from Python: recorded runs and container sessions, phases, ledgers and verdicts.

The package drives the ``aet`` binary (``$AET_BIN``, else ``aet`` on ``PATH``) and reads what
it writes; recording and auditing are aet's own. The Inspect AI sandbox ``aet`` is registered
through the ``inspect_ai`` entry point (:mod:`aet.inspect`).
"""

from .container import Container, ExecResult, check_runtime, container
from .errors import (
    AetError,
    AetFailedError,
    AetNotFound,
    ContainerError,
    InconclusiveError,
    RefusedError,
    RunTimeout,
    ShipError,
    UnsupportedRuntimeError,
)
from .query import query, ship
from .result import RunResult, Summary, read_ledger
from .run import run
from .session import RecordedRun, recorded_run

__version__ = "0.1.0"

__all__ = [
    "AetError",
    "AetFailedError",
    "AetNotFound",
    "Container",
    "ContainerError",
    "ExecResult",
    "InconclusiveError",
    "RecordedRun",
    "RefusedError",
    "RunResult",
    "RunTimeout",
    "ShipError",
    "Summary",
    "UnsupportedRuntimeError",
    "check_runtime",
    "container",
    "query",
    "read_ledger",
    "recorded_run",
    "run",
    "ship",
]
