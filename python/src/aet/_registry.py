"""Loaded by Inspect AI through the ``inspect_ai`` entry point: registers the ``aet`` sandbox
and the ``aet/verdict`` scorer."""

from .inspect_sandbox import AetSandboxEnvironment, verdict

__all__ = ["AetSandboxEnvironment", "verdict"]
