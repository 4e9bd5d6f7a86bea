"""OTLP/HTTP: ``POST /v1/traces`` as a small ASGI application served by uvicorn.

HTTP/1.1 itself (request line, header fields, Content-Length, chunked bodies, 100-continue,
keep-alive) is uvicorn's and httptools' (llhttp, a strict parser in C): a parser of our own
is where a proxy in front and this server could disagree on where a request ends (request
smuggling). What is ours is what OTLP asks of a receiver, and what keeps a small collector
alive against clients that are slow or hostile:

- the answers: 200 with partial success, 400 + ``google.rpc.Status`` for a malformed payload
  (protobuf or JSON, as the request was), 401 without the bearer token, 413 past the size
  limit (after gzip too), 415 for another content type, 501 for a transfer coding other than
  chunked, 503 + Retry-After under pressure;
- deadlines: a connection that sends nothing is closed after ``idle_s``; once its first byte
  came, the request line and header fields must follow within ``head_s``; the body must keep
  to a schedule (a grace, then ``min_body_rate`` bytes a second), so a client that trickles
  bytes cannot hold a request slot, a thread or a descriptor for ever;
- caps: on connections (beyond it a connection is told 503 and closed), on requests being
  read and decoded at once (they bound the memory decoding takes), and on what llhttp
  leaves unbounded (the head's bytes and fields, the chunks of a body).
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import json
import logging
import socket
import ssl
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import uvicorn
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .otlp import MalformedOTLP, TooManyRows
from .receiver import Overloaded
from .wal import WALError

log = logging.getLogger("otel_assay.collect")

DRAIN_LIMIT = 128 << 20  # an oversized body up to this size is read and discarded before the 413
MAX_HEADER_BYTES = 65536  # the request target and header fields together
MAX_HEADERS = 100  # header fields in one request, as the standard library's HTTP client allows
PROTOBUF, JSON = "application/x-protobuf", "application/json"


@dataclass
class HttpTimeouts:
    """How long a client may take, in seconds (and bytes per second for a body).

    The body is held to a schedule for every byte, not one deadline for the last: a declared
    20 MiB body at a flat deadline let a client that sent nothing keep its request slot
    minutes. 503 + Retry-After rather than 408 for a late body, because OTLP exporters
    retry only 429/502/503/504 and a client on a slow link would otherwise drop its batch.
    """

    idle_s: float = 60.0  # a connection waiting for its next request
    head_s: float = 10.0  # the request line and header fields, from their first byte
    body_grace_s: float = 10.0  # before the body's schedule starts
    min_body_rate: float = 64 << 10  # bytes per second, after the grace
    slot_wait_s: float = 1.0  # a request waiting for a free request slot, then 503


class _TooLarge(Exception):
    def __init__(self, limit: int, after: str = " after decompression"):
        super().__init__(f"request body exceeds {limit} bytes{after}")


class _Late(Exception):
    """The body fell behind its schedule, or the client went away mid-body."""


def status_body(grpc_code: int, message: str, is_json: bool) -> bytes:
    """A ``google.rpc.Status``, encoded as the request was (OTLP/HTTP's error body)."""
    if is_json:
        return json.dumps({"code": grpc_code, "message": message}).encode()
    return status_pb2.Status(code=grpc_code, message=message).SerializeToString()


def bearer_ok(authorization: str | None, token: str) -> bool:
    """Whether an Authorization value carries ``token``: the scheme name is case-insensitive
    (as every HTTP authentication scheme), the token compared in constant time so its bytes
    cannot be guessed one at a time from the answer's timing."""
    scheme, _, credentials = (authorization or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode())


def read_gzip(body: bytes, limit: int) -> bytes:
    """The decompressed body, every member of it (a gzip file is a series of members, which
    is what concatenated gzip streams are); anything after the last member that is not one
    is malformed. Never more than ``limit`` bytes are inflated: a small bomb stays small."""
    parts: list[bytes] = []
    size = 0
    data = body
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(data, limit + 1 - size)
        except zlib.error as e:
            raise MalformedOTLP(f"invalid gzip body: {e}") from None
        size += len(out)
        if size > limit:
            raise _TooLarge(limit)
        if not d.eof:
            raise MalformedOTLP("truncated gzip body")
        parts.append(out)
        data = d.unused_data
        if not data:
            return parts[0] if len(parts) == 1 else b"".join(parts)


class _Request:
    """What the answers need of one ASGI request."""

    def __init__(self, scope, receive, send, timeouts: HttpTimeouts):
        self.receive, self.send, self.timeouts = receive, send, timeouts
        self.method, self.path = scope["method"], scope["path"]
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:  # names come lower-cased; the first of repeated ones
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        self.headers = headers
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        self.ctype = ctype
        self.is_json = ctype == JSON
        # None: chunked, its length known once read (the server has checked the framing; a
        # request with neither header has no body)
        chunked = "transfer-encoding" in headers
        self.length = None if chunked else int(headers.get("content-length", "0"))
        # a body whose end the server knows: by its length, or by plain chunked framing
        self.framed = not chunked or headers["transfer-encoding"].strip(" \t").lower() == "chunked"
        self.loop = asyncio.get_running_loop()
        self.due = self.loop.time() + timeouts.body_grace_s
        self.got = 0

    async def _piece(self) -> tuple[bytes, bool]:
        """The next piece of the body and whether more follows, on the body's schedule."""
        left = self.due + (self.got + 1) / self.timeouts.min_body_rate - self.loop.time()
        if left <= 0:
            raise _Late
        try:
            message = await asyncio.wait_for(self.receive(), left)
        except TimeoutError:
            raise _Late from None
        if message["type"] == "http.disconnect":
            raise _Late
        data = message.get("body", b"")
        self.got += len(data)
        return data, message.get("more_body", False)

    async def body(self, limit: int) -> bytes:
        """All of the body; ``_TooLarge`` past ``limit`` bytes (the rest left unread)."""
        pieces = []
        more = True
        while more:
            data, more = await self._piece()
            if self.got > limit:
                raise _TooLarge(limit, "")
            pieces.append(data)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def drain(self, cap: int) -> bool:
        """Read and discard the rest, up to ``cap`` bytes; whether it all came."""
        try:
            more = True
            while more:
                _, more = await self._piece()
                if self.got > cap:
                    return False
        except _Late:
            return False
        return True

    async def answer(self, status: int, body: bytes, ctype: str, headers: dict | None = None,
                     close: bool = False) -> None:
        out = [(b"Content-Type", ctype.encode()), (b"Content-Length", str(len(body)).encode())]
        if close:  # said, so that a client reusing the connection does not hit a broken pipe
            out.append((b"Connection", b"close"))
        out += [(k.encode(), str(v).encode()) for k, v in (headers or {}).items()]
        await self.send({"type": "http.response.start", "status": status, "headers": out})
        await self.send({"type": "http.response.body", "body": body})

    async def error(self, status: int, grpc_code: int, message: str, headers: dict | None = None,
                    close: bool = False, is_json: bool | None = None) -> None:
        is_json = self.is_json if is_json is None else is_json
        await self.answer(status, status_body(grpc_code, message, is_json), JSON if is_json else PROTOBUF,
                          headers, close)


class OTLPHttpApp:
    """The ASGI application: OTLP/HTTP traces into a :class:`~otel_assay.collect.receiver.Collector`.

    ``pool`` runs the decoding and the write-ahead log's fsync off the event loop; its
    threads, ``max_concurrent_requests`` of them, are the request slots.
    """

    def __init__(self, collector, *, token: str | None, max_body: int, max_concurrent_requests: int,
                 timeouts: HttpTimeouts):
        self.collector = collector
        self.token = token
        self.max_body = max_body
        self.timeouts = timeouts
        self.pool = ThreadPoolExecutor(max_concurrent_requests, thread_name_prefix="otel-assay-http")
        self._slots = asyncio.Semaphore(max_concurrent_requests)  # bound to the server's loop at first use

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        try:
            req = _Request(scope, receive, send, self.timeouts)
            if req.method == "GET":
                await self._get(req)
            elif req.method == "POST":
                await self._post(req)
            else:
                await req.error(405, 12, f"method {req.method[:20]} not allowed; POST OTLP traces to /v1/traces",
                                {"Allow": "GET, POST"}, close=True, is_json=True)
        except OSError:  # the client did not wait for the answer
            pass
        except asyncio.CancelledError:
            # the server stopping past its grace, with a request still waiting for the disk: its
            # client gets no answer and retries elsewhere; no traceback in the collector's log
            pass

    async def _get(self, req: _Request) -> None:
        # a GET has no body here: one sent anyway is not read, so the connection closes after it
        close = req.length not in (None, 0) or "transfer-encoding" in req.headers
        if req.path.rstrip("/") in ("", "/health", "/healthz"):
            c = self.collector
            h = c.health()
            health = {"status": h.status}
            # probes ask without the token; the cause (paths, errors) and the counts (how much
            # traffic, how far behind) are told only to a client that holds it
            if self.token is None or bearer_ok(req.headers.get("authorization"), self.token):
                if h.cause is not None:
                    health["cause"] = h.cause
                if h.since_s is not None:
                    health["since_s"] = round(h.since_s, 1)
                health.update(buffered_rows=c.buffered_rows, unwritten_spans=c.unwritten_spans,
                              flush_errors=c.stats.flush_errors, faults=c.stats.faults)
            body = json.dumps(health).encode()
            await req.answer(200 if h.status == "ok" else 503, body, JSON, close=close)
        else:
            await req.error(404, 5, "not found; OTLP traces are POSTed to /v1/traces", close=close, is_json=True)

    async def _post(self, req: _Request) -> None:
        if req.path != "/v1/traces":
            return await self._refuse(req, 404, 5, f"no such path {req.path[:200]!r}; OTLP traces are POSTed "
                                      "to /v1/traces")
        if self.token is not None and not bearer_ok(req.headers.get("authorization"), self.token):
            # before any other answer about the request: nothing of it is told to a client without the token
            return await self._refuse(req, 401, 16, "missing or wrong bearer token (Authorization: Bearer ...)",
                                      {"WWW-Authenticate": "Bearer"})
        if not req.framed:
            coding = req.headers["transfer-encoding"]
            return await self._refuse(req, 501, 12, f"transfer coding {coding[:100]!r} is not supported: only "
                                      "chunked is; compress with Content-Encoding: gzip")
        if req.ctype not in (PROTOBUF, JSON):
            return await self._refuse(req, 415, 3, f"unsupported Content-Type {req.ctype[:100]!r}; use "
                                      "application/x-protobuf or application/json", is_json=True)
        if req.length is not None and req.length > self.max_body:
            return await self._refuse(req, 413, 8, f"request body of {req.length} bytes exceeds the "
                                      f"{self.max_body}-byte limit", cap=DRAIN_LIMIT)
        try:
            self.collector.check_capacity()
        except Overloaded as e:
            return await self._refuse(req, 503, 14, str(e), {"Retry-After": e.retry_after})
        try:
            await asyncio.wait_for(self._slots.acquire(), self.timeouts.slot_wait_s)
        except TimeoutError:
            return await self._refuse(req, 503, 14, "too many requests in flight; retry shortly", {"Retry-After": 1})
        try:
            body = await req.body(self.max_body)
            answer = await req.loop.run_in_executor(self.pool, self._store, body, req.headers, req.is_json)
        except _TooLarge:
            answer = None
        except _Late:
            try:
                await req.error(503, 14, "the request body did not arrive in time (at least "
                                f"{self.timeouts.min_body_rate:.0f} bytes/s after a grace); retry",
                                {"Retry-After": 1}, close=True)
            except OSError:
                pass
            return
        finally:
            self._slots.release()
        if answer is None:  # a chunked body past the limit: drained out of the slot
            return await self._refuse(req, 413, 8, f"request body exceeds {self.max_body} bytes", cap=DRAIN_LIMIT)
        await req.answer(*answer)

    def _store(self, body: bytes, headers: dict, is_json: bool) -> tuple:
        """Decode and store one body (on a pool thread): the arguments of the answer."""
        def error(status, code, message, extra=None):
            return status, status_body(code, message, is_json), JSON if is_json else PROTOBUF, extra

        encoding = headers.get("content-encoding", "identity").strip().lower()
        try:
            if encoding == "gzip":
                body = read_gzip(body, self.max_body)
            elif encoding not in ("identity", ""):
                return error(415, 3, f"unsupported Content-Encoding {encoding[:40]!r}; use gzip or none")
            result = self.collector.submit_json(body) if is_json else self.collector.submit_protobuf(body)
        except (_TooLarge, TooManyRows) as e:
            return error(413, 8, str(e))
        except MalformedOTLP as e:
            return error(400, 3, str(e))
        except Overloaded as e:
            return error(503, 14, str(e), {"Retry-After": e.retry_after})
        except WALError as e:
            return error(503, 14, f"cannot make the batch durable: {e}", {"Retry-After": 5})
        except Exception as e:
            # a bug, not the client's fault: without an answer the client saw the connection
            # drop and retried the same batch for ever. 500 is not retried by OTLP exporters.
            log.exception("cannot store a request's spans")
            return error(500, 13, f"internal error storing the spans: {type(e).__name__}: {str(e)[:200]}")
        partial = result.rejected or result.error_message
        if is_json:
            doc = {"partialSuccess": {"rejectedSpans": str(result.rejected), "errorMessage": result.error_message}}
            return 200, json.dumps(doc if partial else {}).encode(), JSON, None
        resp = ExportTraceServiceResponse()
        if partial:
            resp.partial_success.rejected_spans = result.rejected
            resp.partial_success.error_message = result.error_message
        return 200, resp.SerializeToString(), PROTOBUF, None

    async def _refuse(self, req: _Request, status: int, grpc_code: int, message: str, headers: dict | None = None,
                      *, cap: int | None = None, is_json: bool | None = None) -> None:
        """Answer ``status`` without taking the request, and close the connection. The body,
        up to a cap (the size limit, or more for the 413 itself), is read and discarded
        first, so that a client that sends all of it before reading the reply (urllib, for
        one) gets the status instead of a broken pipe; a body declared beyond the cap is not
        read, nor one whose framing this server does not take. A client that falls behind or
        goes away gets no answer."""
        cap = cap or self.max_body
        if req.framed and (req.length is None or req.length <= cap):
            if not await req.drain(cap) and req.length is not None:
                return
        await req.error(status, grpc_code, message, headers, close=True, is_json=is_json)


class ConnectionGuard:
    """Refuses a listener's connections past the cap, and closes the ones that are idle too
    long or send their request head too slowly.

    Each connection is a thread-free protocol object, but a descriptor: idle clients that
    are never cut off use up the process's descriptors, and then nobody, over HTTP or gRPC,
    can connect. Beyond ``max_connections`` a connection is told 503 + Retry-After (which
    exporters retry) and closed.
    """

    BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n" \
           b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"

    def __init__(self, max_connections: int, timeouts: HttpTimeouts):
        self.max_connections = max_connections
        self.timeouts = timeouts
        self._refusing = False
        self.out_of_fds = False  # told once, until a connection is accepted again

    def admit(self, open_connections: int) -> bool:
        """Whether the newest of ``open_connections`` may stay."""
        self.out_of_fds = False
        if open_connections <= self.max_connections:
            self._refusing = False
            return True
        if not self._refusing:
            self._refusing = True
            log.warning("%d HTTP connections open (--max-connections): refusing new ones until some close",
                        self.max_connections)
        return False


class _TooMany(Exception):
    """A request past MAX_HEADER_BYTES, MAX_HEADERS or its chunks' bound (answered 400, closed)."""


class _GuardedProtocol(HttpToolsProtocol):
    """uvicorn's protocol on httptools (llhttp, a strict parser in C) under a
    :class:`ConnectionGuard`, set on a subclass per server.

    Overridden: a connection's start and end, and the parser's callbacks for a request's
    start, its target, each header field, the end of its head and each chunk. llhttp streams
    the head and the chunks and sets no limit of its own, so a client could send header
    fields until memory ran out, or a body a byte a chunk. uvicorn closes a connection idle
    after a response (``timeout_keep_alive``) but sets no deadline before the first request
    nor on a head sent slowly: a timer of ours covers those two.
    """

    guard: ConnectionGuard
    max_chunks: int  # in one chunked body
    busy_body = status_body(14, "too many connections open; retry shortly", True)

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._timer = None
        if not self.guard.admit(len(self.connections)):
            transport.write(ConnectionGuard.BUSY % (len(self.busy_body), self.busy_body))
            transport.close()
            return
        self._set_deadline(self.guard.timeouts.idle_s)

    def connection_lost(self, exc) -> None:
        self._set_deadline(None)
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        # the first byte of a request: its line and header fields have head_s to arrive
        self._set_deadline(self.guard.timeouts.head_s)
        self.head_bytes = self.head_fields = self.chunks = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        self.head_fields += 1
        if self.head_fields > MAX_HEADERS:
            raise _TooMany(f"more than {MAX_HEADERS} header fields")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._set_deadline(None)  # the body keeps to the application's schedule
        super().on_headers_complete()

    def on_chunk_header(self) -> None:
        # each chunk costs a call into Python whatever its size: a body sent a byte a chunk
        # cost a minute of CPU per 20 MiB, so past 64 chunks they must average 1 KiB
        self.chunks += 1
        if self.chunks > self.max_chunks:
            raise _TooMany(f"more than {self.max_chunks} chunks; send chunks of 1 KiB or more")

    def _count_head(self, n: int) -> None:
        self.head_bytes += n
        if self.head_bytes > MAX_HEADER_BYTES:
            raise _TooMany(f"request head larger than {MAX_HEADER_BYTES} bytes")

    def _set_deadline(self, seconds: float | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if seconds is not None:
            self._timer = self.loop.call_later(seconds, self._cut_off)

    def _cut_off(self) -> None:
        self._timer = None
        log.debug("closing HTTP connection from %s: idle or its request head too slow", self.client)
        self.transport.close()


class HttpServer:
    """The OTLP/HTTP listener: uvicorn on its own event loop, in its own thread."""

    def __init__(self, collector, addr: tuple[str, int], *, token: str | None, max_body: int,
                 max_concurrent_requests: int, max_connections: int, tls_cert: str | None = None,
                 tls_key: str | None = None, timeouts: HttpTimeouts | None = None, backlog: int = 64):
        host, port = addr
        self.timeouts = timeouts or HttpTimeouts()
        self.guard = ConnectionGuard(max_connections, self.timeouts)
        self.app = OTLPHttpApp(collector, token=token, max_body=max_body,
                               max_concurrent_requests=max_concurrent_requests, timeouts=self.timeouts)
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
            self.sock.listen(backlog)
        except OSError:
            self.sock.close()
            raise
        self.port = self.sock.getsockname()[1]
        protocol = type("GuardedProtocol", (_GuardedProtocol,),
                        {"guard": self.guard, "max_chunks": 64 + max_body // 1024})
        config = uvicorn.Config(
            self.app, http=protocol, ws="none", lifespan="off", log_config=None, access_log=False,
            server_header=False, date_header=False, proxy_headers=False, backlog=backlog,
            timeout_keep_alive=max(1, int(self.timeouts.idle_s)), ssl_certfile=tls_cert, ssl_keyfile=tls_key)
        config.load()  # a certificate that cannot be loaded fails here, not in the server's thread
        logging.getLogger("uvicorn.error").setLevel(logging.ERROR)  # a bad request is the client's problem
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="otel-assay-http", daemon=True)
        self._thread.start()
        started.wait(10)

    def _run(self, started: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(self._loop_error)
        loop.call_soon(started.set)
        try:
            loop.run_until_complete(self.server.serve(sockets=[self.sock]))
        finally:
            loop.close()

    def _loop_error(self, loop, context) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            # asyncio stops accepting for a second and tries again (it does not spin)
            if self.guard.out_of_fds:
                return
            self.guard.out_of_fds = True
            log.warning("out of file descriptors (%s): pausing new HTTP connections; lower --max-connections "
                        "or raise the limit (ulimit -n)", exc.strerror)
        elif isinstance(exc, (OSError, ssl.SSLError)):
            # a client gone mid-request, or plain HTTP sent to the TLS port: its problem
            log.debug("HTTP connection failed: %s", exc)
        else:
            loop.default_exception_handler(context)

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace`` seconds)."""
        self.server.config.timeout_graceful_shutdown = int(max(1, grace))
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(grace + 5)
        self.sock.close()
        self.app.pool.shutdown(wait=True)
