"""API dialects: each one SSE API's contract, spoken and checked, one package per API.

A dialect meets the `Protocol` contract, which every SSE API meets (its
paths, its streams, its terminal frames, its errors, its heartbeats), and an
LLM API's also the `Generation` contract (neutral events in and out, its
JSON answer, its prompt, its ids and models). `DIALECTS` maps each name to
its dialect: the built-in `openai-chat`, `openai-completions`,
`openai-responses`, `lmstudio-chat`, `anthropic-messages`, `gemini` and
`bedrock-converse` and `bedrock-invoke`, the agent UI
streams `ag-ui` and `ai-sdk-ui` and the agent protocols `a2a` and `mcp`
(`Protocol`s without generation), and
any that other installed packages add through the entry-point group
`sse_tape.dialects` (see `registry`). `for_path` tells which one a path
speaks, `detect` which one an interaction speaks; `Answer` puts a stream's
events together. A protocol brings its own matchers (`RequestMatcher`) and
the responders of its features that keep state (`ProtocolResponder`, lent
each request as `Incoming`).
"""

from __future__ import annotations

from .answer import Answer, Call
from .generation import Generation, Prompt
from .protocol import (
    Incoming,
    Kept,
    Protocol,
    ProtocolResponder,
    RequestMatcher,
    Violation,
    check_error_response,
    check_framing,
)
from .registry import (
    DIALECTS,
    ENTRY_POINTS,
    detect,
    dialect_for,
    fallback,
    for_path,
    for_request,
    generation,
    get,
    speaking,
)

__all__ = [
    "DIALECTS",
    "ENTRY_POINTS",
    "Answer",
    "Call",
    "Generation",
    "Incoming",
    "Kept",
    "Prompt",
    "Protocol",
    "ProtocolResponder",
    "RequestMatcher",
    "Violation",
    "check_error_response",
    "check_framing",
    "detect",
    "dialect_for",
    "fallback",
    "for_path",
    "for_request",
    "generation",
    "get",
    "speaking",
]
