"""Who may drive a server: the checks that keep a web page the user has open from doing so.

A page in the user's browser can reach a server on loopback: cross-origin
(its `Origin` is its own site's), or after DNS rebinding (its own name now
points at 127.0.0.1, so its `Host` is that name and it reads the answers as
its own). What only the user's own clients may do — the control endpoints
(`/__sse_tape__/`), the fault header, and forwarding to an upstream (with
the credentials of the `--upstream` URL) — is refused to a request whose
`Host` is not a loopback name or address of the server's port (or a name the
user allows), and to one whose `Origin` is not the server's own (or one the
user names). The replay API's answers carry CORS headers for any page, as
they always have; the rest only for the origins the user names.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

__all__ = ["Access", "is_loopback", "is_loopback_name"]


def is_loopback(remote: str | None) -> bool:
    """Whether a client's address is on this machine."""
    try:
        address = ipaddress.ip_address(remote or "")
    except ValueError:
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def is_loopback_name(name: str) -> bool:
    """Whether a host name (an IPv6 address in brackets or not) names this machine's loopback: `localhost`,
    127.0.0.0/8 or ::1. `localhost.evil.example` and `127.0.0.1.nip.io` do not: a page's site can own them."""
    return name.lower() == "localhost" or is_loopback(name.removeprefix("[").removesuffix("]"))


def _split_host(host: str) -> tuple[str, int | None] | None:
    """A `Host` header's name (an IPv6 address in its brackets) and port (None: no port); None when it is
    no host at all."""
    name, port = host.strip().lower(), ""
    if name.startswith("["):  # [::1]:8080
        inside, bracket, rest = name[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        name, port = f"[{inside}]", rest[1:]
    elif name.count(":") == 1:
        name, _, port = name.partition(":")
    elif ":" in name:  # an IPv6 address without its brackets is no host
        return None
    if not name or (port and not port.isdigit()):
        return None
    return name, int(port) if port else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Access:
    """Who may use the control endpoints, the fault header and the upstream a server forwards to.

    `allow_remote_control` lets clients on other machines use the control
    endpoints and the fault header (by their address; their `Host` is checked
    all the same). `allowed_hosts` are `Host` names (`name` for any port,
    `name:port` for one) obeyed besides the loopback names of the server's
    port, and `listen_host`, the address the server listens on when it is one
    address. `cors_origins` are the pages (`https://app.example:3000`, or
    `*` for any) that may use all of it from their browser, besides the
    server's own (http, a loopback or allowed name, the server's port).
    """

    allow_remote_control: bool = False
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    listen_host: str = "127.0.0.1"

    def refused(self, http: web.BaseRequest, port: int, *, peer: bool = False) -> str | None:
        """Why `http` may not use what only the user's own clients may, in a few words (after "refused: ");
        None when it may. `port` is the server's; with `peer`, a client on another machine is refused too, unless
        `allow_remote_control`."""
        if peer and not self.allow_remote_control and not is_loopback(http.remote):
            return "a client on another machine (see --allow-remote-control)"
        host = http.headers.get("Host")
        if host is not None and not self._host_obeyed(host, port):
            shown = host[:100].encode("ascii", "backslashreplace").decode()
            return f"Host {shown!r} is not a loopback name or address of port {port} (see --allow-host)"
        origin = http.headers.get("Origin")
        if origin is not None and not self.origin_obeyed(origin, port):
            shown = origin[:200].encode("ascii", "backslashreplace").decode()
            return f"a page from {shown} (see --cors-origin)"
        return None

    def origin_obeyed(self, origin: str, port: int) -> bool:
        """Whether a page from `origin` may use the server: one the user named, or the server's own."""
        if "*" in self.cors_origins or origin.rstrip("/").lower() in self._named:
            return True
        try:
            parsed = urlsplit(origin)
            origin_port = parsed.port or 80
        except ValueError:
            return False
        name = parsed.netloc.rpartition("@")[2].lower()
        if name.endswith(f":{origin_port}"):
            name = name.removesuffix(f":{origin_port}")
        return parsed.scheme == "http" and origin_port == port and self._name_obeyed(name, origin_port)

    def cors(self, http: web.BaseRequest, port: int) -> dict[str, str]:
        """The CORS headers for what is not the replay API's ordinary answers (the control endpoints, what
        an upstream forwards): only for a page the user named, or the server's own."""
        origin = http.headers.get("Origin")
        if origin is None or not self.origin_obeyed(origin, port):
            return {}
        return {"Access-Control-Allow-Origin": origin, "Access-Control-Expose-Headers": "*", "Vary": "Origin"}

    @property
    def _named(self) -> frozenset[str]:
        return frozenset(o.rstrip("/").lower() for o in self.cors_origins)

    def _host_obeyed(self, host: str, port: int) -> bool:
        split = _split_host(host)
        if split is None:
            return False
        name, given = split
        return (given is None or given == port or self._allowed(name, given)) and self._name_obeyed(name, given)

    def _name_obeyed(self, name: str, port: int | None) -> bool:
        if is_loopback_name(name) or self._allowed(name, port):
            return True
        listening = self.listen_host.lower()
        try:
            if ipaddress.ip_address(listening).is_unspecified:
                return False  # 0.0.0.0 and :: are no name a client addresses
        except ValueError:
            pass  # a name
        return name == (f"[{listening}]" if ":" in listening else listening)

    def _allowed(self, name: str, port: int | None) -> bool:
        for allowed in self.allowed_hosts:
            split = _split_host(allowed)
            if split is not None and split[0] == name and split[1] in (None, port):
                return True
        return False
