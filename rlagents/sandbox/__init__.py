"""Isolated execution of untrusted code: a limited subprocess, no network, pinned files."""

from rlagents.sandbox._sandbox import network_namespace_available
from rlagents.sandbox._sandbox import run_python
from rlagents.sandbox._sandbox import SandboxLimits
from rlagents.sandbox._sandbox import SandboxResult
from rlagents.sandbox._sandbox import SandboxUnavailable
from rlagents.sandbox._sandbox import sha256_of
from rlagents.sandbox._sandbox import VIOLATIONS
from rlagents.sandbox._sandbox import Violation

__all__ = [
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "VIOLATIONS",
    "Violation",
    "network_namespace_available",
    "run_python",
    "sha256_of",
]
