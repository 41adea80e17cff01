"""The Agent2Agent protocol (A2A), versions 1.0 and 0.3, each over JSON-RPC and its REST binding: `A2A`, its `a2a`
matcher and `Replies` responder."""

from __future__ import annotations

from .dialect import A2A, TASK_FAILED
from .messages import a2a, is_a2a_request
from .replies import Replies

__all__ = ["A2A", "TASK_FAILED", "Replies", "a2a", "is_a2a_request"]
