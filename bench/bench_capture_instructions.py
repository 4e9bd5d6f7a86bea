"""Added cost per agent step of otel-assay's capture, in instructions counted by valgrind:
the deterministic counterpart of bench_capture.py.

    python bench/bench_capture_instructions.py [--rounds 10] [--runs 50]

bench_capture.py measures CPU time, and on a shared machine its ratio moved from 2.6 to
3.2 within an hour with the code unchanged: too noisy to see a 5 % change. Here each mode
runs in its own process under ``valgrind --tool=callgrind`` (hash seed fixed, no timed
flushes), once with 10 graph runs and once with 10 + --runs; the difference is the cost of
--runs runs, free of imports and warm-up. Modes:
  bare     the graph, nothing instrumented
  null     bench_capture's in-run handler calling a tracer that does nothing: LangChain's
           dispatch and the handler's own bookkeeping
  in_run   the same handler calling the SDK: bare SDK spans with the attributes our adapter
           records, started and ended where ours are (own provider, BatchSpanProcessor,
           discarding exporter)
  assay    otel_assay.instrument(), each run inside a trial, spans to a Parquet lake,
           flushed every 20 runs as bench_capture.py flushes each turn
ratio = (assay - null) / (in_run - null): our adapter, spans and export (with the dispatch
of the callbacks only our handler has) against the bare SDK spans alone. Instructions are
not time (cache misses are not in them), so this is a second opinion beside
bench_capture.py's, not the same figure. Needs valgrind; prints one JSON line (with
"skipped" when valgrind is not installed). Takes about 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BASE_RUNS = 10
FLUSH_EVERY = 20
MODES = ["bare", "null", "in_run", "assay"]


def child(mode: str, runs: int, rounds: int) -> None:
    """Run the workload ``runs`` times in ``mode`` (inside valgrind)."""
    sys.path.insert(0, HERE)
    import bench_capture as bc
    from contextvars import ContextVar

    import otel_assay
    from langchain_core.tracers import context as lc_context

    run, _steps = bc.workload(rounds)

    def in_trial():
        with otel_assay.trial("bench", version="v1"):
            run()

    by_kind = bc.recorded_steps(in_trial)  # every mode pays this once: it cancels out
    fn = run
    if mode == "assay":
        otel_assay.instrument(["langchain"])
        fn = in_trial
    elif mode in ("null", "in_run"):
        tracer = bc._sdk_provider().get_tracer("bench") if mode == "in_run" else _NullTracer()
        handler = bc.in_run_handler(tracer, by_kind, timed=False)
        lc_context.register_configure_hook(ContextVar("bench_handler", default=handler), inheritable=True)
    for i in range(runs):
        fn()
        if mode == "assay" and i % FLUSH_EVERY == FLUSH_EVERY - 1:
            otel_assay.flush()
    if mode == "assay":
        otel_assay.flush()


class _NullSpan:
    def end(self):
        pass


class _NullTracer:
    def start_span(self, name, kind=None, attributes=None):
        return _NullSpan()


def instructions(mode: str, runs: int, rounds: int) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-capture-instr-") as lake:
        env = {**os.environ, "PYTHONHASHSEED": "0", "OTEL_ASSAY_DIR": lake,
               "OTEL_ASSAY_FLUSH_SECONDS": "86400"}  # only the explicit flushes: the same files every time
        p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                            os.path.abspath(__file__), "--child", mode, "--runs", str(runs), "--rounds", str(rounds)],
                           env=env, capture_output=True, text=True)
    m = re.search(r"Collected : (\d+)", p.stderr)
    if p.returncode != 0 or not m:
        raise SystemExit(f"valgrind run of {mode} failed ({p.returncode}): {p.stderr[-2000:]}")
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50, help="graph runs measured (beyond the 10 subtracted)")
    ap.add_argument("--rounds", type=int, default=10, help="tool rounds per graph run")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.runs, a.rounds)
    if shutil.which("valgrind") is None:
        print(json.dumps({"bench": "capture_langgraph_instructions", "skipped": "valgrind is not installed"}))
        return
    steps = 2 * a.rounds + 2  # as bench_capture.workload counts them
    jobs = [(mode, n) for mode in MODES for n in (BASE_RUNS, BASE_RUNS + a.runs)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        counts = dict(zip(jobs, pool.map(lambda j: instructions(j[0], j[1], a.rounds), jobs)))
    per_step = {mode: (counts[(mode, BASE_RUNS + a.runs)] - counts[(mode, BASE_RUNS)]) / (a.runs * steps)
                for mode in MODES}
    assay_added = per_step["assay"] - per_step["null"]
    span_in_run = per_step["in_run"] - per_step["null"]
    print(json.dumps({
        "bench": "capture_langgraph_instructions", "steps_per_run": steps, "runs": a.runs,
        "instructions_per_step": {m: round(v) for m, v in per_step.items()},
        "dispatch_and_bookkeeping_per_step": round(per_step["null"] - per_step["bare"]),
        "assay_added_per_step": round(assay_added),
        "bare_span_in_run_per_step": round(span_in_run),
        "ratio_assay_vs_bare_span_in_run": round(assay_added / span_in_run, 2),
        "target_ratio_max": 2.0,
    }))


if __name__ == "__main__":
    main()
