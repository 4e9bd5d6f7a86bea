"""Shared helpers for the capture tests: run a script in a fresh interpreter (the global
tracer provider can be set once per process) and read the lake back with the real engine."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SCRIPTS = Path(__file__).parent / "scripts"
REPO = Path(__file__).resolve().parents[2]


def run_script(script: str, lake: Path, *args: str, env: dict | None = None, timeout: float = 180,
               check: bool = True) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CREWAI_", "OPENAI_"))}
    e.update({"OTEL_ASSAY_DIR": str(lake), "PYTHONPATH": str(REPO) + os.pathsep + str(SCRIPTS),
              "CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false",
              "OTEL_SDK_DISABLED": "false", "OPENAI_API_KEY": "sk-offline-test", "PYTHONUNBUFFERED": "1"})
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    path = script if os.path.isabs(script) else str(SCRIPTS / script)
    p = subprocess.run([sys.executable, path, *args], env=e, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError(f"{script} exited {p.returncode}\nstdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-8000:]}")
    return p


@contextlib.contextmanager
def otlp_sink():
    """A loopback OTLP/HTTP endpoint that accepts every export; yields (endpoint URL, list of
    (path, content type, decompressed body)) received."""
    bodies: list = []

    class Sink(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            data = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.headers.get("content-encoding") == "gzip":
                data = gzip.decompress(data)
            bodies.append((self.path, self.headers.get("content-type"), data))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.end_headers()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", bodies
    finally:
        srv.shutdown()
        srv.server_close()


_ENGINES: dict = {}


def query(lake: Path, sql: str, params=None) -> list[dict]:
    """Run SQL over the lake's views with the real engine (one engine per lake: a lake is
    complete once its script has exited, and binding the views takes a second)."""
    from otel_assay.analyze.engine import Engine
    key = str(lake)
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = Engine(lake)
    return eng.query(sql, params).to_pylist()


SPAN_COLS = ("trace_id, span_id, parent_span_id, name, kind, status_code, status_message, op, agent_name, "
             "tool_name, tool_call_id, model, provider, input_tokens, output_tokens, error_type, run_id, "
             "scenario, version, trial_index, outcome, score, error_class, scope_name, start_time_unix_nano, "
             "attributes, resource_attributes")


def spans(lake: Path, where: str = "TRUE", params=None) -> list[dict]:
    rows = query(lake, f"SELECT {SPAN_COLS} FROM spans WHERE {where} ORDER BY start_time_unix_nano, name", params)
    for r in rows:
        r["attributes"] = dict(r["attributes"] or [])
        r["resource_attributes"] = dict(r["resource_attributes"] or [])
    return rows


def trial_spans(lake: Path, scenario: str) -> list[list[dict]]:
    """Every trial of a scenario: a list (one per trace, by trial index) of its spans in start order."""
    rows = spans(lake, "trace_id IN (SELECT trace_id FROM spans WHERE name = ?)", [f"assay.trial {scenario}"])
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["trace_id"], []).append(r)
    traces = list(by.values())
    traces.sort(key=lambda t: root(t)["trial_index"] if root(t)["trial_index"] is not None else -1)
    return traces


def root(trace: list[dict]) -> dict:
    roots = [s for s in trace if s["parent_span_id"] is None]
    assert len(roots) == 1, [s["name"] for s in roots]
    return roots[0]


def by_id(trace: list[dict]) -> dict[str, dict]:
    return {s["span_id"]: s for s in trace}


def parent_of(trace: list[dict], span: dict) -> dict | None:
    return by_id(trace).get(span["parent_span_id"])


def steps(trace: list[dict]) -> list[tuple]:
    """(name, parent name) for every span but the trial root, in start order."""
    ids = by_id(trace)
    return [(s["name"], ids[s["parent_span_id"]]["name"] if s["parent_span_id"] in ids else None)
            for s in trace if s["parent_span_id"] is not None]


def jload(s):
    return json.loads(s) if s is not None else None


def need(*modules: str) -> None:
    """Skip the calling test module unless the modules are installed (without importing
    them: importing a framework in the pytest process costs seconds and is not needed,
    since the framework runs in the script's subprocess)."""
    import importlib.util

    import pytest
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"not installed in this environment: {', '.join(missing)} (see docs/testing.md)",
                    allow_module_level=True)
