"""Guardrails: the allow-list policy, the review gate, the audit trail and replay (host code)."""

from rlagents.guardrails._audit import AuditLog
from rlagents.guardrails._audit import AuditTamperError
from rlagents.guardrails._audit import read_audit_log
from rlagents.guardrails._audit import verify_audit_log
from rlagents.guardrails._policy import AllowListPolicy
from rlagents.guardrails._policy import Approver
from rlagents.guardrails._policy import Decision
from rlagents.guardrails._policy import Guard
from rlagents.guardrails._policy import guarded_toolbox
from rlagents.guardrails._policy import interactive_approver
from rlagents.guardrails._policy import ReviewGate
from rlagents.guardrails._replay import replay_record
from rlagents.guardrails._replay import ReplayReport
from rlagents.guardrails._replay import ReplaySuite

__all__ = [
    "AllowListPolicy",
    "Approver",
    "AuditLog",
    "AuditTamperError",
    "Decision",
    "Guard",
    "ReplayReport",
    "ReplaySuite",
    "ReviewGate",
    "guarded_toolbox",
    "interactive_approver",
    "read_audit_log",
    "replay_record",
    "verify_audit_log",
]
