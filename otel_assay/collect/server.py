"""``otel-assay collect``'s listeners: OTLP/gRPC and OTLP/HTTP around one Collector."""

from __future__ import annotations

import ipaddress
import resource
import ssl
from dataclasses import dataclass

from .grpc import grpc_server
from .http import HttpServer, HttpTimeouts
from .receiver import DEFAULT_MAX_BODY, Collector

# descriptors kept out of the connection caps: the log, the lake's files, gRPC's own, imports
FD_RESERVE = 64


def default_max_connections() -> int:
    """Connections each listener holds open at most by default: half of what RLIMIT_NOFILE
    leaves after a reserve, so that idle clients on one listener cannot take every descriptor
    (the other listener, the log and the lake need theirs); at most 1024."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(8, min(1024, (soft - FD_RESERVE) // 2))


def parse_hostport(value: str, default_port: int) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT``, ``[::1]:PORT`` or ``HOST`` → (host, port)."""
    value = value.strip()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.lstrip(":") or str(default_port)
    elif value.count(":") == 1:
        host, port = value.split(":")
    else:  # a bare host, or a bare IPv6 address
        host, port = value, str(default_port)
    host = host or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid port in {value!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen_addresses(grpc: str, http: str, token: str | None) -> dict[str, tuple[str, int] | None]:
    """The listeners' addresses from ``HOST:PORT`` or ``off``, by protocol; ValueError says
    what to pass instead. A listener beyond loopback needs a bearer token: without one,
    anyone who reaches the port writes into the lake."""
    addrs: dict[str, tuple[str, int] | None] = {}
    for proto, value, port in (("grpc", grpc, 4317), ("http", http, 4318)):
        if value.strip().lower() == "off":
            addrs[proto] = None
            continue
        try:
            addrs[proto] = parse_hostport(value, port)
        except ValueError as e:
            raise ValueError(f"--{proto}: {e}; use HOST:PORT, for example 127.0.0.1:{port}") from None
    if not any(addrs.values()):
        raise ValueError("both listeners are off; enable --grpc or --http")
    exposed = [f"{h}:{p}" for h, p in filter(None, addrs.values()) if not is_loopback(h)]
    if exposed and not token:
        raise ValueError(f"listening on non-loopback address {', '.join(exposed)} needs a bearer token: "
                         "set OTEL_ASSAY_TOKEN or pass --token-file")
    return addrs


def check_token(token: str, source: str) -> str:
    """``token`` if a client can send it; ValueError naming ``source`` otherwise (never
    repeating the token, a secret).

    HTTP and gRPC strip whitespace around a header value and cannot carry a newline, a
    control character or (gRPC) a non-ASCII one: such a token was accepted at start and then
    every client was refused with 401. Refused here instead, not stripped, because the token
    the clients hold is the one to fix."""
    if not token:
        raise ValueError(f"{source} is empty; give the token clients send as Authorization: Bearer TOKEN")
    if not all(" " < c < "\x7f" for c in token):
        raise ValueError(f"{source}: the token contains whitespace (a trailing newline?), a control character "
                         "or a non-ASCII character, which no client can send in an Authorization header; "
                         "remove it (a --token-file may end in one newline)")
    return token


def read_token_file(path: str) -> str:
    """The token in file ``path``: its text without the one line ending editors and ``echo``
    add; ValueError naming the file when it cannot be read or the token could not be sent."""
    try:
        with open(path, "rb") as f:
            text = f.read(64 * 1024).decode("utf-8")
    except OSError as e:
        raise ValueError(f"--token-file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"--token-file {path}: not UTF-8 text") from None
    for ending in ("\r\n", "\n"):
        if text.endswith(ending):
            text = text[: -len(ending)]
            break
    return check_token(text, f"--token-file {path}")


def check_tls(cert: str | None, key: str | None) -> None:
    """Both or neither, and loadable: gRPC would report a bad certificate as a failure to
    bind the port. ValueError says what is wrong."""
    if bool(cert) != bool(key):
        raise ValueError("--tls-cert and --tls-key go together")
    if not cert:
        return
    try:
        # an empty password: an encrypted key fails here instead of prompting on the terminal
        # (the gRPC server cannot use one either)
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(cert), str(key), password=b"")
    except (ssl.SSLError, OSError) as e:
        raise ValueError(f"--tls-cert {cert} / --tls-key {key}: cannot load them ({e}); give a PEM certificate "
                         "(chain) and its PEM private key") from None


@dataclass
class Listener:
    protocol: str
    host: str
    port: int
    tls: bool

    def describe(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # "::1:4317" reads as a bare address
        if self.protocol == "http":
            scheme = "https" if self.tls else "http"
            return f"OTLP/HTTP listening on {scheme}://{host}:{self.port}/v1/traces"
        return f"OTLP/gRPC listening on {host}:{self.port}" + (" (TLS)" if self.tls else "")


class Receiver:
    """The gRPC and HTTP listeners around one :class:`Collector`."""

    def __init__(
        self,
        collector: Collector,
        *,
        grpc_addr: tuple[str, int] | None = ("127.0.0.1", 4317),
        http_addr: tuple[str, int] | None = ("127.0.0.1", 4318),
        token: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        grpc_workers: int = 4,
        max_concurrent_requests: int = 4,
        max_connections: int | None = None,
        http_timeouts: HttpTimeouts | None = None,
    ):
        self.collector = collector
        self.listeners: list[Listener] = []
        self.http: HttpServer | None = None
        self._grpc = None
        if not (tls_cert and tls_key):  # TLS takes both
            tls_cert = tls_key = None
        tls = tls_cert is not None
        if max_connections is None:
            max_connections = default_max_connections()
        if http_addr is not None:
            self.http = HttpServer(collector, http_addr, token=token, max_body=max_body,
                                   max_concurrent_requests=max_concurrent_requests, max_connections=max_connections,
                                   tls_cert=tls_cert, tls_key=tls_key, timeouts=http_timeouts)
            self.listeners.append(Listener("http", http_addr[0], self.http.port, tls))
        if grpc_addr is not None:
            try:
                self._grpc, port = grpc_server(collector, grpc_addr, token=token, max_body=max_body,
                                               workers=grpc_workers, max_calls=max_concurrent_requests,
                                               max_connections=max_connections, tls_cert=tls_cert, tls_key=tls_key)
            except BaseException:
                if self.http is not None:
                    self.http.sock.close()
                raise
            self.listeners.append(Listener("grpc", grpc_addr[0], port, tls))

    def start(self) -> None:
        if self._grpc is not None:
            self._grpc.start()
        if self.http is not None:
            self.http.start()

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (both listeners at once, ``grace``
        seconds), then flush and close the collector."""
        stopped = self._grpc.stop(grace) if self._grpc is not None else None
        if self.http is not None:
            self.http.stop(grace)
        if stopped is not None:
            stopped.wait(grace + 1)
        self.collector.close()
