"""Faults before the stream: another status, the headers held back, no answer, no body."""

from __future__ import annotations

from ..cassette import End, Request
from ..dialects import Protocol
from ..plan import Write
from .model import Act, Fault, FaultKind, Key, Run, Stage, duration, status_code, text, whole_number

__all__ = ["BEFORE"]


class _Status(Act):
    """Answer with this status and the API's JSON error body, when the stream would have begun."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        head = run.head
        head.replaced = True
        code: int = fault["code"]
        message = fault["message"] or f"injected by sse-tape: status {code}"
        status, headers, body = run.dialect.http_error(code, message)
        head.status, head.headers = status, list(headers)
        if fault["retry_after"] is not None:
            head.headers.append(("retry-after", str(fault["retry_after"])))
        first = head.writes[0][0] if head.writes else 0.0
        head.rewrite([(first, body)])
        head.end, head.end_at = End.COMPLETE, first
        head.headers.append(("content-length", str(len(body))))
        self.note(f"answered {status} before the stream")


class _Ttfb(Act):
    """The headers, and so everything after them, this much later."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.delay: float = fault["delay"]
        run.head.headers_at = self.delay
        self.note(f"headers after {self.delay:g} s")

    def feed(self, writes: list[Write]) -> list[Write]:
        return [(t + self.delay, data) for t, data in writes]

    def close(self, end_at: float) -> tuple[list[Write], float]:
        return [], end_at + self.delay


class _Hang(Act):
    """Accept the request and never answer."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        run.head.replaced = True
        run.head.hang = True
        self.note("accepted and never answered")


class _Empty(Act):
    """A 200 with no body, when the stream would have begun."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        head = run.head
        head.replaced = True
        head.status = 200
        head.end_at = head.writes[0][0] if head.writes else 0.0
        head.rewrite([])
        head.end = End.COMPLETE
        head.headers = [(k, v) for k, v in head.headers if k.lower() != "content-length"] + [("content-length", "0")]
        self.note("200 with no body")


class _SessionExpired(Act):
    """Answer a request made in a session as its server does once the session has expired: 404, in the
    protocol's words (MCP's `Session not found`), so that the client starts a new one. A request in no session
    (one that starts a session) is left alone."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        dialect, head = run.dialect, run.head
        session = dialect.session(run.request) if run.request is not None else None
        if session is None:
            self.note(f"a request in no session ({dialect.name}): left alone")
            return
        head.replaced = True
        status, headers, body = dialect.http_error(404, "Session not found")
        head.status, head.headers = status, [*headers, ("content-length", str(len(body)))]
        first = head.writes[0][0] if head.writes else 0.0
        head.rewrite([(first, body)])
        head.end, head.end_at = End.COMPLETE, first
        self.note(f"answered {status} before the stream: session {session} expired")


def _in_a_session(request: Request, dialect: Protocol) -> bool:
    return dialect.session(request) is not None


#: The faults before the stream, in the order `sse-tape faults` lists them.
BEFORE = (
    FaultKind("status", Stage.BEFORE, "answer with this status and the API's JSON error instead of the recording",
              (Key("code", "HTTP status", status_code, required=True),
               Key("retry_after", "seconds", whole_number(0, 86_400)),
               Key("message", "text", text)),
              _Status, main="code", replaces=True),
    FaultKind("ttfb", Stage.BEFORE, "wait this long before the headers",
              (Key("delay", "duration", duration(), "1s"),), _Ttfb, main="delay"),
    FaultKind("hang", Stage.BEFORE, "accept the request and never answer", (), _Hang, replaces=True),
    FaultKind("empty", Stage.BEFORE, "answer 200 with no body", (), _Empty, replaces=True),
    FaultKind("session-expired", Stage.BEFORE,
              "answer a request in a session 404, as for a session that expired (MCP's Session not found)",
              (), _SessionExpired, replaces=True, fits=_in_a_session),
)  # fmt: skip
