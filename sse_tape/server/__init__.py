"""The server: each request is answered by an ordered chain of responders (see `app`).

`app` holds the aiohttp application (`MockServer`); `replay` the responder that answers from recordings;
`api` how a server is made (`build_server`) and run (`serve`, `aserve`, the recording servers); `control`
the one way in from outside a running server; `access` who may use it (the `Host` and `Origin` checks that
keep a web page out); `connections` the bounds kept on connections; `threaded`
running a server in a thread for synchronous code. What a responder is and what it is handed
(`sse_tape.responder`), and the live pipeline the forwarder and the model answer through (`sse_tape.live`),
lie beside this package, below it: the responders outside it (`background`, `catalog`, `record`, `synth`)
import them without importing the server, whose app imports the responders.
"""

from __future__ import annotations

from ..responder import Exchange, Responder
from .access import is_loopback_name
from .api import (
    arecording,
    aserve,
    build_server,
    collect_for_serving,
    load_cassettes,
    recording,
    recording_server,
    serve,
)
from .app import CONTROL_PREFIX, FAULT_HEADER, Limits, MockServer
from .control import Control, Snapshot
from .replay import Replay
from .threaded import run_in_thread

__all__ = [
    "CONTROL_PREFIX",
    "FAULT_HEADER",
    "Control",
    "Exchange",
    "Limits",
    "MockServer",
    "Replay",
    "Responder",
    "Snapshot",
    "arecording",
    "aserve",
    "build_server",
    "collect_for_serving",
    "is_loopback_name",
    "load_cassettes",
    "recording",
    "recording_server",
    "run_in_thread",
    "serve",
]
