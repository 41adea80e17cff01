"""The one request a command line sends (record URL, check --live), from curl-like -X, -d and -H options."""

from __future__ import annotations

import sys
from pathlib import Path

from .._exceptions import ConfigError

__all__ = ["one_shot_request", "read_data"]


def one_shot_request(
    method: str | None, data: str | None, header: tuple[str, ...]
) -> tuple[str, list[tuple[str, str]], bytes]:
    """Method, headers and body from the curl-like -X, -d and -H options."""
    headers = []
    for line in header:
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise ConfigError(f"-H {line!r}: write a header as 'Name: value'")
        headers.append((name.strip(), value.strip()))
    body = read_data(data) if data is not None else b""
    if body and not any(name.lower() == "content-type" for name, _ in headers):
        headers.append(("content-type", "application/json"))
    return method or ("POST" if data is not None else "GET"), headers, body


def read_data(data: str) -> bytes:
    """The bytes a --data (or synth's --request) names: itself, `@FILE` a file's, `@-` standard input's."""
    if not data.startswith("@"):
        return data.encode()
    if data == "@-":
        return sys.stdin.buffer.read()
    try:
        return Path(data[1:]).read_bytes()
    except OSError as exc:
        raise ConfigError(f"--data {data}: cannot read {data[1:]}: {exc.strerror or exc}") from None
