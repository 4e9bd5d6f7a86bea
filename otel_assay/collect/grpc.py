"""OTLP/gRPC: the TraceService's Export on grpcio, a thin transport over the Collector."""

from __future__ import annotations

import logging
from concurrent import futures
from pathlib import Path

import grpc
from google.protobuf import duration_pb2
from google.protobuf.any_pb2 import Any
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

from .http import bearer_ok
from .otlp import MalformedOTLP, TooManyRows
from .receiver import Overloaded
from .wal import WALError

log = logging.getLogger("otel_assay.collect")

# gRPC calls accepted at once; those beyond the worker threads wait for one. grpcio refuses
# the rest with RESOURCE_EXHAUSTED and no RetryInfo, which the Collector's OTLP exporter
# does not retry (the batch is dropped), so this is far above what a sender runs at once
# (the Collector's sending queue: 10 consumers) and the worker threads bound the decoding.
GRPC_MAX_CALLS = 128
# a raw TCP connection that has sent nothing closes after this many ms (grpcio's default,
# 120 s, let idle sockets hold the descriptors that new clients need for two minutes)
GRPC_HANDSHAKE_TIMEOUT_MS = 10_000


def _retry_trailer(seconds: int):
    """The RetryInfo an OTLP exporter reads to know when to send an UNAVAILABLE batch again,
    in both places exporters look: the Collector's (Go) reads it from the status details, the
    Python SDK's from its own trailer, ``google.rpc.retryinfo-bin``."""
    info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds))
    detail = Any()
    detail.Pack(info)
    st = status_pb2.Status(code=grpc.StatusCode.UNAVAILABLE.value[0], message="overloaded", details=[detail])
    return (("grpc-status-details-bin", st.SerializeToString()), ("google.rpc.retryinfo-bin", info.SerializeToString()))


def trace_service(collector, token: str | None):
    """The OTLP TraceService as a generic handler that receives raw bytes.

    Parsing the request ourselves (instead of letting grpcio deserialize it) lets a
    malformed payload get INVALID_ARGUMENT, as OTLP asks, rather than grpcio's INTERNAL,
    and lets an overloaded collector refuse before spending time on decoding.
    """

    def export(body: bytes, context):
        if token is not None:
            md = dict(context.invocation_metadata())
            if not bearer_ok(md.get("authorization"), token):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (authorization: Bearer ...)")
        try:
            result = collector.submit_protobuf(body)
        except TooManyRows as e:  # not retried (no RetryInfo): the same batch would be refused again
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except MalformedOTLP as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except Overloaded as e:
            context.set_trailing_metadata(_retry_trailer(e.retry_after))
            context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        except WALError as e:
            context.set_trailing_metadata(_retry_trailer(5))
            context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot make the batch durable: {e}")
        except Exception as e:  # a bug: say so (INTERNAL is not retried) instead of grpcio's UNKNOWN
            log.exception("cannot store a request's spans")
            context.abort(grpc.StatusCode.INTERNAL, f"internal error storing the spans: {type(e).__name__}: {str(e)[:200]}")
        resp = pb.ExportTraceServiceResponse()
        if result.rejected or result.error_message:
            resp.partial_success.rejected_spans = result.rejected
            resp.partial_success.error_message = result.error_message
        return resp

    method = grpc.unary_unary_rpc_method_handler(
        export, request_deserializer=None, response_serializer=pb.ExportTraceServiceResponse.SerializeToString)
    return grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService",
                                                {"Export": method})


def grpc_server(collector, addr: tuple[str, int], *, token: str | None, max_body: int, workers: int,
                max_calls: int, max_connections: int, tls_cert: str | None = None,
                tls_key: str | None = None) -> tuple[grpc.Server, int]:
    """A gRPC server bound to ``addr`` (not started yet), and the port it got."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="otel-assay-grpc"),
        options=[("grpc.max_receive_message_length", max_body), ("grpc.so_reuseport", 0),
                 ("grpc.max_allowed_incoming_connections", max_connections),
                 ("grpc.server_handshake_timeout_ms", GRPC_HANDSHAKE_TIMEOUT_MS)],
        maximum_concurrent_rpcs=max(GRPC_MAX_CALLS, max_calls),
    )
    server.add_generic_rpc_handlers((trace_service(collector, token),))
    host, port = addr
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if tls_cert and tls_key:
        creds = grpc.ssl_server_credentials([(Path(tls_key).read_bytes(), Path(tls_cert).read_bytes())])
        bound = server.add_secure_port(target, creds)
    else:
        bound = server.add_insecure_port(target)
    if bound == 0:
        raise OSError(f"cannot bind gRPC listener to {target} (address in use?)")
    return server, bound
