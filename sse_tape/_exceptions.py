"""The exceptions sse-tape raises.

Every error derives from `SSETapeError`, and also from the built-in exception
a caller would already catch for that kind of failure::

    SSETapeError
    ├── CassetteError
    │   ├── CassetteNotFoundError   (also FileNotFoundError)
    │   └── CassetteFormatError     (also ValueError): corrupt, truncated, foreign or too new
    ├── ConfigError                 (also ValueError): a bad option, such as a pacing spec
    ├── ModelError                  a model that cannot be found, read or loaded, or cannot take a request
    ├── NoMatchError                (also LookupError): no recorded interaction answers a request
    ├── StateError                  (also ConnectionError): a shared replay state's store does not answer
    ├── StreamError                 (also ValueError): an event stream breaks a limit, such as a line too long
    └── UpstreamError               (also ConnectionError): the upstream sent no response to record

The command line turns any of them into one line on stderr and exit status 2.
"""

from __future__ import annotations

import errno
import os

__all__ = [
    "CassetteError",
    "CassetteFormatError",
    "CassetteNotFoundError",
    "ConfigError",
    "ModelError",
    "NoMatchError",
    "SSETapeError",
    "StateError",
    "StreamError",
    "UpstreamError",
    "cannot_listen",
]


class SSETapeError(Exception):
    """Base class of every error raised by sse-tape."""


class CassetteError(SSETapeError):
    """A cassette file cannot be read or written."""


class CassetteNotFoundError(CassetteError, FileNotFoundError):
    """The cassette file does not exist."""


class CassetteFormatError(CassetteError, ValueError):
    """The file is not a cassette this version of sse-tape can read."""


class ConfigError(SSETapeError, ValueError):
    """An option or specification given by the user is not valid."""


class ModelError(SSETapeError):
    """A model cannot be found, read or loaded, or cannot take a request (a prompt longer than its context).

    `status` is what a live server answers with: 400 for a request the model cannot take, else 500.
    """

    def __init__(self, message: str, *, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


class NoMatchError(SSETapeError, LookupError):
    """No recorded interaction answers a request; the message names the closest ones."""


class StateError(SSETapeError, ConnectionError):
    """The store the replay state lives in, shared with other servers (Redis), does not answer: the server
    answers 503 until it does."""


class StreamError(SSETapeError, ValueError):
    """An event stream breaks a limit: a line or an event longer than the decoder's maximum."""


class UpstreamError(SSETapeError, ConnectionError):
    """The upstream could not be reached, or sent no response head in time."""


def cannot_listen(host: str, port: int, exc: OSError) -> SSETapeError:
    """The one-line error for a server that could not bind: the system's reason, without asyncio's wording
    around it; an unknown host (a `socket.gaierror`, whose codes are no errno) says so in its own words."""
    known = exc.errno is not None and exc.errno in errno.errorcode
    reason = os.strerror(exc.errno).lower() if known and exc.errno is not None else exc.strerror or str(exc)
    return SSETapeError(f"cannot listen on {host}:{port}: {reason}")
