"""Evaluation reports: task success and tool-use quality over finished episodes (host code)."""

from rlagents.evaluation._report import summarize_episodes

__all__ = ["summarize_episodes"]
