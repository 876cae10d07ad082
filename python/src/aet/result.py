"""What a finished run holds: its ledger's metadata, its audit, its rows."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

LEDGER = "ledger.arrow"
AUDIT = "audit.json"
AUDIT_HTML = "audit.html"

PathLike = Union[str, "os.PathLike[str]"]


def ledger_path(run: PathLike) -> Path:
    """A run directory's ledger (or the file itself when given one)."""
    p = Path(run)
    return p / LEDGER if p.is_dir() else p


def read_ledger(run: PathLike) -> Any:
    """The ledger of a run (its directory or the file) as a ``pyarrow.Table``, metadata
    included. An unfinished ledger (aet was killed) reads up to its last whole batch."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    path = ledger_path(run)
    try:
        with pa.memory_map(str(path)) as f:
            return ipc.open_file(f).read_all()
    except pa.ArrowInvalid:
        # No footer: the stream after the file's 8-byte magic.
        with open(path, "rb") as f:
            f.seek(8)
            return ipc.open_stream(f).read_all()


def ledger_metadata(run: PathLike) -> dict[str, str]:
    """The ledger's key-value metadata (``aet.*``), as text."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    path = ledger_path(run)
    try:
        with pa.memory_map(str(path)) as f:
            schema = ipc.open_file(f).schema
    except pa.ArrowInvalid:
        with open(path, "rb") as f:
            f.seek(8)
            schema = ipc.open_stream(f).schema
    return {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}


@dataclass(frozen=True)
class Summary:
    """A run in one line: what a leaderboard row needs."""

    dir: Path
    exit_status: Optional[int]
    complete: bool
    reasons: list[str]
    verdict: Optional[str]
    findings: list[dict[str, Any]]


FINDING_LISTS = ("cheat_hits", "contaminant_hits", "out_of_scope", "warnings", "blocked")


@dataclass
class RunResult:
    """A finished run: its directory, the command's exit status, whether the record is
    complete (and why not), and, when it was audited, the verdict and findings of
    ``audit.json``."""

    dir: Path
    exit_status: Optional[int]
    complete: bool
    reasons: list[str]
    verdict: Optional[str] = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    audit: Optional[dict[str, Any]] = None
    metadata: dict[str, str] = field(default_factory=dict)
    #: aet's and the command's standard error.
    stderr: str = ""
    #: The command's standard output (:func:`aet.run`).
    stdout: bytes = b""

    @classmethod
    def load(cls, run: PathLike, stderr: str = "") -> "RunResult":
        """Reads a run directory aet wrote."""
        d = Path(run)
        meta = ledger_metadata(d)
        reasons_raw = meta.get("aet.incomplete_reasons")
        reasons: list[str] = []
        if reasons_raw:
            reasons = [r.get("text", r.get("code", "")) for r in json.loads(reasons_raw)]
        if meta.get("aet.finished") != "true":
            reasons.insert(0, "the ledger is unfinished (aet did not finish it)")
        audit: Optional[dict[str, Any]] = None
        audit_file = d / AUDIT
        if audit_file.exists():
            audit = json.loads(audit_file.read_text())
        findings: list[dict[str, Any]] = []
        if audit is not None:
            for name in FINDING_LISTS:
                for f in audit.get(name, []):
                    findings.append({"list": name, **f})
        exit_status = meta.get("aet.exit_status")
        return cls(
            dir=d,
            exit_status=int(exit_status) if exit_status is not None else None,
            complete=meta.get("aet.complete") == "true" and meta.get("aet.finished") == "true",
            reasons=reasons,
            verdict=audit.get("verdict") if audit is not None else None,
            findings=findings,
            audit=audit,
            metadata=meta,
            stderr=stderr,
        )

    @property
    def ledger(self) -> Path:
        """The ledger file."""
        return self.dir / LEDGER

    @property
    def report(self) -> Optional[Path]:
        """The HTML report, when the run was audited."""
        p = self.dir / AUDIT_HTML
        return p if p.exists() else None

    @property
    def phases(self) -> list[dict[str, Any]]:
        """The run's phases (``aet.phases``): ``agent``, then each one ``phase()`` began."""
        raw = self.metadata.get("aet.phases")
        return list(json.loads(raw)) if raw else []

    @property
    def provenance(self) -> list[dict[str, Any]]:
        """Each phase judged by provenance (``audit.json``'s ``provenance``): what it loaded
        that an earlier phase wrote, counted by place (``solution``, ``repository``, ``new``,
        ``outside``, ``allowed``). The findings themselves are in :attr:`findings`, each with
        its ``provenance`` (the place, the path judged, the writer's steps)."""
        return list((self.audit or {}).get("provenance", []))

    def table(self) -> Any:
        """The ledger as a ``pyarrow.Table`` (one row per access)."""
        return read_ledger(self.dir)

    def summary(self) -> Summary:
        """The run in one line (see :class:`Summary`)."""
        return Summary(
            dir=self.dir,
            exit_status=self.exit_status,
            complete=self.complete,
            reasons=list(self.reasons),
            verdict=self.verdict,
            findings=list(self.findings),
        )
