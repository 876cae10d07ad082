"""``aet.query``: SQL over many runs, through ``aet query``."""

from __future__ import annotations

import os
from typing import Any, Sequence, Union

from ._binary import call
from .result import PathLike


def query(sql: str, runs: Union[PathLike, Sequence[PathLike]], *, strict: bool = False,
          threads: int = 0) -> Any:
    """The result of ``sql`` over ``runs`` (run directories, ledgers, directories of runs,
    globs, and ``s3://BUCKET/PREFIX`` for every run shipped there) as a ``pyarrow.Table``. The tables are ``events`` (every row of every ledger, with
    its ``run``), ``runs`` (one row per run: verdict, completeness, counts) and ``findings``
    (every finding of every ``audit.json``), as ``aet query`` documents them."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    if isinstance(runs, (str, os.PathLike)):
        runs = [runs]
    if not runs:
        raise ValueError("no runs given")
    args = ["query", sql, *[os.fspath(r) for r in runs], "--format", "arrow"]
    if strict:
        args.append("--strict")
    if threads:
        args += ["--threads", str(threads)]
    p = call(args)
    return ipc.open_file(pa.BufferReader(p.stdout)).read_all()


def ship(run_dir: PathLike, url: str) -> None:
    """Sends the finished run directory ``run_dir`` to ``url/RUN`` (``s3://BUCKET/PREFIX``),
    as ``aet ship`` does: every file, then ``shipped.json``. Raises :class:`aet.AetError`
    (exit 124) when it could not be shipped; the local copy is untouched."""
    call(["ship", os.fspath(run_dir), url, "--quiet"])
