"""What a gateway does to a stream: sse-tape on both sides of a proxy.

The probe serves cassettes as the upstream (`upstream`), sends each recorded
request straight to it and through the gateway (`reading`: every socket
read timed), lines the two answers up block by block (`comparison`), puts
faults in the stream upstream and judges how the gateway passed them on
(`faults`), and says what it found (`report`); `runner` runs it all
(`Probe`, and `probe_in_thread` for synchronous code), `picture` draws it,
and `fidelity` times a server's pacing against its recording.
"""

from __future__ import annotations

from .faults import DEFAULT_FAULTS
from .fidelity import Fidelity, fidelity
from .picture import html_page
from .reading import Ending, Piece, Reading, read
from .report import FaultReport, Finding, InteractionReport, ProbeReport
from .runner import Probe, ThreadedProbe, probe_in_thread

__all__ = [
    "DEFAULT_FAULTS",
    "Ending",
    "FaultReport",
    "Fidelity",
    "Finding",
    "InteractionReport",
    "Piece",
    "Probe",
    "ProbeReport",
    "Reading",
    "ThreadedProbe",
    "fidelity",
    "html_page",
    "probe_in_thread",
    "read",
]
