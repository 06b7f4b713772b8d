"""Isolated execution of untrusted code: kernel namespaces (pid, mount, net), the unprivileged
user, limits, pinned files, a test verdict the code under test cannot forge, and a pool of
pre-started sandboxes for many short runs."""

from rlagents.sandbox._pool import pooled
from rlagents.sandbox._pool import SandboxPool
from rlagents.sandbox._sandbox import ISOLATION_MODES
from rlagents.sandbox._sandbox import isolation_mode
from rlagents.sandbox._sandbox import kernel_isolation_problem
from rlagents.sandbox._sandbox import network_namespace_available
from rlagents.sandbox._sandbox import run_python
from rlagents.sandbox._sandbox import SandboxLimits
from rlagents.sandbox._sandbox import SandboxResult
from rlagents.sandbox._sandbox import SandboxUnavailable
from rlagents.sandbox._sandbox import sha256_of
from rlagents.sandbox._sandbox import VIOLATIONS
from rlagents.sandbox._sandbox import Violation
from rlagents.sandbox._verdict import parse_python
from rlagents.sandbox._verdict import run_tests
from rlagents.sandbox._verdict import split_pinned_test
from rlagents.sandbox._verdict import TestVerdict

__all__ = [
    "ISOLATION_MODES",
    "SandboxLimits",
    "SandboxPool",
    "SandboxResult",
    "SandboxUnavailable",
    "TestVerdict",
    "VIOLATIONS",
    "Violation",
    "isolation_mode",
    "kernel_isolation_problem",
    "network_namespace_available",
    "parse_python",
    "pooled",
    "run_python",
    "run_tests",
    "sha256_of",
    "split_pinned_test",
]
