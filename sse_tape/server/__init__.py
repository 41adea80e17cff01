"""The server: each request is answered by an ordered chain of responders (see `app`).

`app` holds the aiohttp application (`MockServer`); `replay` the responder that answers from recordings;
`responder` what a responder is and what it is handed; `api` how a server is made and run (`serve`,
`aserve`, the recording servers); `connections` the bounds kept on connections; `threaded` running a
server in a thread for synchronous code.
"""

from __future__ import annotations

from .api import arecording, aserve, collect_for_serving, load_cassettes, recording, recording_server, serve
from .app import CONTROL_PREFIX, FAULT_HEADER, Limits, MockServer
from .replay import Replay
from .responder import Exchange, Responder
from .threaded import run_in_thread

__all__ = [
    "CONTROL_PREFIX",
    "FAULT_HEADER",
    "Exchange",
    "Limits",
    "MockServer",
    "Replay",
    "Responder",
    "arecording",
    "aserve",
    "collect_for_serving",
    "load_cassettes",
    "recording",
    "recording_server",
    "run_in_thread",
    "serve",
]
