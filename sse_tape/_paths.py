"""Dotted paths into JSON documents: `user`, `metadata.trace_id`, `messages.*.name`, `messages.0`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["locate"]


def locate(doc: Any, path: Sequence[str]) -> list[tuple[Any, Any]]:
    """The (container, key) pairs that `path` names in `doc`; `*` stands for every key or index.

    Pairs come in document order, so deleting them in reverse keeps list indexes valid.
    """
    head, rest = path[0], path[1:]
    keys: Sequence[Any]
    if isinstance(doc, dict):
        keys = list(doc) if head == "*" else [head] if head in doc else []
    elif isinstance(doc, list):
        keys = range(len(doc)) if head == "*" else [int(head)] if head.isdigit() and int(head) < len(doc) else []
    else:
        return []
    if not rest:
        return [(doc, key) for key in keys]
    return [hit for key in keys for hit in locate(doc[key], rest)]
