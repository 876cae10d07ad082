"""docs/harness.md's API reference is the package's own: generated from its signatures and
docstrings, like docs/cli.md from the CLI (``AET_BLESS=1`` rewrites it)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import aet
import aet.inspect_sandbox as sandbox_module
import aet.isolation as isolation_module

DOC = Path(__file__).resolve().parents[2] / "docs" / "harness.md"
START, END = "<!-- generated:python-api -->", "<!-- end:python-api -->"


def _first_paragraph(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _entry(qual: str, obj: Any) -> list[str]:
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return [f"- `{qual}` ({obj.__mro__[1].__name__}): {_first_paragraph(obj)}"]
    if inspect.isclass(obj):
        out = [f"### `{qual}`", "", _first_paragraph(obj), ""]
        for name, member in sorted(vars(obj).items()):
            if name.startswith("_") and name not in ("__init__",):
                continue
            if isinstance(member, property):
                out.append(f"- `.{name}`: {_first_paragraph(member)}")
            elif inspect.isfunction(member) or isinstance(member, classmethod):
                fn = member.__func__ if isinstance(member, classmethod) else member
                sig = str(inspect.signature(fn))
                for first in ("self", "cls"):
                    sig = sig.replace(f"({first}, ", "(").replace(f"({first})", "()")
                if name == "__init__":
                    out.append(f"- `{qual}{sig}`")
                else:
                    out.append(f"- `.{name}{sig}`: {_first_paragraph(fn)}".rstrip(": "))
        return out + [""]
    return [f"### `{qual}{inspect.signature(obj)}`", "", _first_paragraph(obj), ""]


def reference() -> str:
    out: list[str] = []
    errors: list[str] = []
    for name in sorted(aet.__all__):
        obj = getattr(aet, name)
        if name in ("container", "recorded_run"):
            continue  # aliases of Container and RecordedRun
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            errors += _entry(f"aet.{name}", obj)
        else:
            out += _entry(f"aet.{name}", obj)
    out += ["### Exceptions", "", *errors, ""]
    for name in ("AetSandboxEnvironment", "AetSandboxConfig", "verdict", "load_config"):
        out += _entry(f"aet.inspect_sandbox.{name}", getattr(sandbox_module, name))
    for name in isolation_module.__all__:
        out += _entry(f"aet.isolation.{name}", getattr(isolation_module, name))
    return "\n".join(out).rstrip() + "\n"


def test_the_api_reference_in_the_docs_is_the_packages() -> None:
    text = DOC.read_text()
    assert START in text and END in text, f"{DOC} has no {START} section"
    head, rest = text.split(START, 1)
    body, tail = rest.split(END, 1)
    want = "\n" + reference()
    if os.environ.get("AET_BLESS") == "1":
        DOC.write_text(head + START + want + END + tail)
        return
    assert body == want, f"{DOC}: the API reference differs from the package; run with AET_BLESS=1"
