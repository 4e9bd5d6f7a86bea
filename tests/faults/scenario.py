"""A fault-injection run: traffic against the collector, fault windows, and the verdict.

A test starts a :class:`Scenario`, injects faults (marking each window's start and end),
waits for recovery after each, and finally stops the traffic, stops the collector with
SIGTERM and compares the lake with what was acknowledged. Problems are collected rather
than asserted one by one, so that a failing run says everything that went wrong (a wedged
collector usually also lies on /health and loses spans), and every run prints one summary
line: faults injected, spans acknowledged, lost, duplicated, longest unavailability.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from dataclasses import dataclass, field

from otel_assay.collect import synthetic

from .traffic import (EXPORT_TIMEOUT_S, SIGTERM_BOUND_S, Client, Export, HealthProbe, Ledger, Target, cause,
                      send_directly, stored_keys)

KINDS = ("http", "grpc")
# How long the collector may take to notice a fault (its flusher meets the fault at the
# next flush, every 0.2 s here, or its periodic check does) before /health must say 503.
DETECT_S = 2.5
# How long after a fault ends (or a restart is ready) the collector may take before both
# exporters succeed again and /health says 200. Generous: the collector retries up to 5 s
# apart, the exporters back off 1 s, 2 s, ... between attempts, and a CI machine of two
# cores may be busy with other work.
RECOVERY_S = 20.0


@dataclass
class Window:
    name: str
    start: float
    end: float = float("nan")


@dataclass
class Scenario:
    target: Target
    ledger: Ledger = field(default_factory=Ledger)
    stop: threading.Event = field(default_factory=threading.Event)
    problems: list[str] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    signals: list[str] = field(default_factory=list)  # "SIGKILL", "SIGTERM": collectors ended mid-run
    notes: list[str] = field(default_factory=list)  # for the summary line
    direct: collections.Counter = field(default_factory=collections.Counter)  # answers to batches sent directly
    # (what ended, seconds until both exporters succeeded and /health said 200, the
    # seconds until /health said 200 alone)
    unavailability: list[tuple[str, float, float]] = field(default_factory=list)

    def __post_init__(self):
        self.clients = [Client(k, self.target, self.ledger, self.stop) for k in KINDS]
        self.probe = HealthProbe(self.target, self.stop)
        self.t0 = time.monotonic()

    # ------------------------------------------------------------------ life cycle
    def __enter__(self) -> "Scenario":
        for t in (*self.clients, self.probe):
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.halt()
        self.target.close()

    def halt(self) -> None:
        """Stop every client thread and the prober (pytest would hang on a running one)."""
        self.stop.set()
        for t in (*self.clients, self.probe):
            t.join(timeout=3 * EXPORT_TIMEOUT_S + 5)
        stuck = [t.name for t in (*self.clients, self.probe) if t.is_alive()]
        assert not stuck, f"threads did not stop: {stuck}"

    def rel(self, t: float) -> str:
        return f"+{t - self.t0:.1f} s"

    # ------------------------------------------------------------------ traffic
    def warm_up(self, min_exports: int = 3, timeout: float = 30.0) -> None:
        """Wait until each exporter has had ``min_exports`` batches acknowledged."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = {k: sum(1 for e in self.ledger.snapshot() if e.ok and e.kind == k) for k in KINDS}
            if all(n >= min_exports for n in done.values()):
                return
            time.sleep(0.05)
        raise AssertionError(f"no steady traffic before any fault: acknowledged batches {done} in {timeout:.0f} s; "
                             f"collector output: {''.join(self.target.output)[-2000:]}")

    def hold(self, seconds: float) -> None:
        time.sleep(seconds)

    # ------------------------------------------------------------------ faults
    def fault_started(self, name: str) -> Window:
        w = Window(name, time.monotonic())
        self.windows.append(w)
        return w

    def fault_ended(self, w: Window) -> None:
        w.end = time.monotonic()

    def hold_fault(self, w: Window, seconds: float) -> None:
        """Let the fault last ``seconds``; once the collector has noticed it, send a batch on
        each protocol directly: it must be refused so that exporters retry it (HTTP 503 with
        Retry-After, gRPC UNAVAILABLE with RetryInfo). A batch it acknowledges anyway joins
        the spans that must be in the lake."""
        probe_at = w.start + min(DETECT_S + 0.5, 0.75 * seconds)
        time.sleep(max(0.0, probe_at - time.monotonic()))
        generation, c = self.target.current()
        noticed = any(h.status == 503 for h in self.probe.between(w.start))
        if c is not None and noticed:
            for kind, refused in (("http", "503"), ("grpc", "UNAVAILABLE")):
                req = synthetic.request(1, rng=random.Random())
                start = time.monotonic()
                answer = send_directly(kind, c, req.SerializeToString())
                self.direct[answer.status] += 1
                if answer.status in ("200", "OK"):
                    keys = tuple((s.trace_id.hex(), s.span_id.hex()) for rs in req.resource_spans
                                 for ss in rs.scope_spans for s in ss.spans)
                    self.ledger.record(Export("direct", start, time.monotonic(), True, keys, generation))
                elif answer.status != refused or not answer.retry_hint:
                    self.problems.append(
                        f"a {kind.upper()} batch sent while {w.name} was answered {answer.status}"
                        f"{'' if answer.retry_hint else ' without a retry hint'} ({answer.detail[:200]!r}); "
                        f"exporters retry only {refused} {'+ Retry-After' if kind == 'http' else '+ RetryInfo'}")
        time.sleep(max(0.0, w.start + seconds - time.monotonic()))

    def check_health_during(self, w: Window, *, steady: bool = True) -> None:
        """/health must say 503, with a cause, from the moment the collector noticed the fault
        (at most DETECT_S after it began) until it ended, and answer every poll.

        A fault that comes and goes by itself (``steady=False``: out of file descriptors, the
        collector may get one back and write for a moment) need only have been noticed."""
        polls = self.probe.between(w.start, w.end)
        seen = collections.Counter(h.status for h in polls)
        where = f"while {w.name} ({self.rel(w.start)} to {self.rel(w.end)})"
        unavailable = [h for h in polls if h.status == 503]
        if not steady:
            self.notes.append(f"/health {where.split(' (')[0]} answered {dict(seen)}")
        if not unavailable:
            self.problems.append(f"/health never said 503 {where}: {len(polls)} polls answered {dict(seen)}")
        elif not steady:
            if not any(cause(h.body) for h in unavailable):
                self.problems.append(f"/health answered 503 without a cause {where}: {unavailable[0].body[:300]!r}")
        else:
            first = unavailable[0]
            if first.t - w.start > DETECT_S:
                self.problems.append(f"/health said 503 only {first.t - w.start:.1f} s after the fault began "
                                     f"(at most {DETECT_S} s) {where}")
            lies = [h for h in polls if h.t > first.t and h.status == 200]
            if lies:
                self.problems.append(f"/health said 200 {where}: {len(lies)} of the {len(polls)} polls after its first "
                                     f"503, first at {self.rel(lies[0].t)}")
            mute = [h for h in unavailable if not cause(h.body)]
            if mute:
                self.problems.append(f"/health answered 503 without a cause {where}: {mute[0].body[:300]!r}")
        silent = [h for h in polls if h.status == -1]
        if silent:
            self.problems.append(f"/health did not answer {len(silent)} of {len(polls)} polls {where} "
                                 "(refused or timed out)")

    def await_recovery(self, since: float, what: str) -> None:
        """Wait until each exporter succeeds and /health says 200 after ``since``; record
        how long that took, or a problem saying what never came back."""
        deadline = since + RECOVERY_S
        while time.monotonic() < deadline:
            if not self.target.alive():
                break
            firsts = {k: self.ledger.first_success(k, since) for k in KINDS}
            ok = self.probe.first_ok(since)
            if ok and all(firsts.values()):
                took = max([ok.t - since] + [e.end - since for e in firsts.values()])
                self.unavailability.append((what, took, ok.t - since))
                return
            time.sleep(0.05)
        self.unavailability.append((what, float("inf"), float("inf")))
        if not self.target.alive():
            _g, c = self.target.current()
            code = c.proc.poll() if c else None
            self.problems.append(f"collector exited (code {code}) instead of recovering after {what}; it printed: "
                                 f"{''.join(self.target.output)[-1500:]}")
            return
        for k in KINDS:
            if self.ledger.first_success(k, since) is None:
                calls = self.ledger.calls(k, started_after=since)
                self.problems.append(
                    f"collector wedged: 0 of {len(calls)} {k.upper()} exports succeeded in {RECOVERY_S:.0f} s "
                    f"after {what}" + (f" (last error: {calls[-1].error})" if calls and calls[-1].error else ""))
        if self.probe.first_ok(since) is None:
            polls = self.probe.between(since)
            self.problems.append(f"/health did not say 200 in {RECOVERY_S:.0f} s after {what}: {len(polls)} polls "
                                 f"answered {dict(collections.Counter(h.status for h in polls))}, last "
                                 f"{polls[-1].body[:200] if polls else ''!r}")

    def sigterm_during(self, w: Window) -> None:
        """SIGTERM while the fault lasts and the clients send: the collector must exit within
        its bound, 0 or 4 (the last Parquet write failed: the spans stay in the log for the
        next start), without a traceback."""
        code, took = self.target.sigterm()
        self.signals.append("SIGTERM")
        self.notes.append(f"SIGTERM while {w.name}: exit {code} after {took:.1f} s")
        if code is None:
            self.problems.append(f"SIGTERM while {w.name} did not stop the collector within {SIGTERM_BOUND_S:.0f} s")
        elif code not in (0, 4):
            self.problems.append(f"SIGTERM while {w.name}: exit {code} after {took:.1f} s (0 or 4 expected); it "
                                 f"printed: {''.join(self.target.output)[-1500:]}")

    def kill(self) -> None:
        self.target.sigkill()
        self.signals.append("SIGKILL")

    def restart(self, what: str) -> None:
        ready = self.target.start()
        self.await_recovery(ready, what)

    # ------------------------------------------------------------------ verdict
    def finish(self, name: str, *, must_be_present_since: float = float("-inf")) -> str:
        """Stop the traffic, SIGTERM the collector, check the lake; return the summary line.

        Every span acknowledged by an export call that started at or after
        ``must_be_present_since`` must be in the lake exactly once; no span anywhere may be
        stored twice."""
        self.halt()
        code, took = self.target.sigterm()
        if code is None:
            self.problems.append(f"SIGTERM did not stop the collector within {SIGTERM_BOUND_S:.0f} s (killed it; "
                                 "the lake was counted after a restart replayed the log)")
            self.target.start()  # what an operator does next: the log is replayed at start
            code, _took = self.target.sigterm()
            if code != 0:
                self.problems.append(f"after the kill, a restarted collector did not stop on SIGTERM either ({code})")
        elif code != 0:
            self.problems.append(f"SIGTERM: the collector exited {code} after {took:.1f} s; it printed: "
                                 f"{''.join(self.target.output)[-1500:]}")
        left = [p.name for p in (self.target.lake / "_wal").glob("seg-*.wal") if p.stat().st_size]
        if code == 0 and left:
            self.problems.append(f"the collector exited 0 but left {len(left)} log segment(s) unwritten: {left[:3]} "
                                 "(their spans reach the lake only at the next start)")
        for tb in self.target.tracebacks()[:2]:
            self.problems.append(f"the collector printed a traceback: ...{tb}")
        stored = stored_keys(self.target.lake)
        unique = set(stored)
        duplicated = len(stored) - len(unique)
        acked = self.ledger.acknowledged()
        must = self.ledger.acknowledged(started_after=must_be_present_since)
        lost = must - unique
        if not acked:
            self.problems.append("no span was acknowledged at all")
        if lost:
            self.problems.append(f"{len(lost)} of {len(must)} acknowledged spans are not in the lake "
                                 f"(e.g. span_id {sorted(lost)[0][1]})")
        if duplicated:
            self.problems.append(f"{duplicated} span rows are duplicates ({len(stored)} rows, {len(unique)} spans)")
        worst = max(self.unavailability, key=lambda x: x[1], default=("-", 0.0, 0.0))
        faults = [w.name for w in self.windows] + self.signals
        summary = (f"[faults] {name}: faults injected {len(faults)} "
                   f"({', '.join(f'{n} x{c}' for n, c in collections.Counter(faults).items())}); "
                   f"spans acknowledged {len(acked):,} (HTTP {self.ledger.acknowledged_count('http'):,}, "
                   f"gRPC {self.ledger.acknowledged_count('grpc'):,})"
                   + (f", {len(must):,} of them must be present" if len(must) != len(acked) else "")
                   + f"; lost {len(lost)}; duplicated {duplicated}; longest unavailability "
                   + (f"{worst[1]:.2f} s (after {worst[0]}; /health 200 after {worst[2]:.2f} s)"
                      if worst[1] < float("inf") else f"over {RECOVERY_S:.0f} s: never recovered after {worst[0]}")
                   + "".join(f"; {n}" for n in self.notes) + f"; the last SIGTERM took {took:.1f} s"
                   + (f"; batches sent directly during faults answered {dict(self.direct)}" if self.direct else ""))
        print(summary)
        return summary

    def verdict(self, summary: str) -> None:
        assert not self.problems, summary + "\n- " + "\n- ".join(self.problems)
