"""Commands over the lake itself: collect (the OTLP receiver), import, compact and sql.

Each imports the library it runs when it runs (start-up time: see the package).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time

import click

from ..errors import DataError, UsageError
from ..report.output import FORMATS
from .options import FiniteFloatRange, lake_option


# ---------------------------------------------------------------------------- collect
# seconds from SIGTERM or SIGINT to exit, at most: the listeners' grace (5 s each), then the
# last flush; docs/collector.md promises it
STOP_SECONDS = 20

@click.command()
@lake_option
@click.option("--grpc", "grpc_addr", default="127.0.0.1:4317", show_default=True, metavar="HOST:PORT",
              help="OTLP/gRPC listen address; 'off' disables it.")
@click.option("--http", "http_addr", default="127.0.0.1:4318", show_default=True, metavar="HOST:PORT",
              help="OTLP/HTTP listen address (POST /v1/traces); 'off' disables it.")
@click.option("--token", envvar="OTEL_ASSAY_TOKEN", default=None,
              help="Bearer token clients must send (Authorization: Bearer TOKEN). Required for a "
                   "non-loopback address. Prefer $OTEL_ASSAY_TOKEN or --token-file: other users see "
                   "the command line.")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Read the bearer token from this file (one line; its line ending is not part of it).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="PEM certificate: serve TLS on both listeners.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="PEM private key for --tls-cert.")
@click.option("--max-body-mib", type=FiniteFloatRange(min=0.001), default=20, show_default=True,
              help="Largest request accepted, after decompression (larger: HTTP 413 / gRPC RESOURCE_EXHAUSTED).")
@click.option("--max-buffered-spans", type=click.IntRange(min=1000), default=500_000, show_default=True,
              help="Spans, events and links acknowledged but not yet in Parquet before clients are told to "
                   "back off (HTTP 503 + Retry-After / gRPC UNAVAILABLE). Bounds the collector's memory. A "
                   "request holding more than this (at least 100,000) is refused: HTTP 413 / gRPC "
                   "RESOURCE_EXHAUSTED.")
@click.option("--max-connections", type=click.IntRange(min=1), default=None,
              help="Connections each listener keeps open at once; more are refused (HTTP 503 + Retry-After, then "
                   "closed). Default: half the open-file limit (ulimit -n) less 64, at most 1024.")
@click.option("--flush-seconds", type=FiniteFloatRange(min=0.05), default=2.0, show_default=True,
              help="How often acknowledged spans are turned into Parquet files.")
@click.option("--fsync/--no-fsync", default=True, show_default=True,
              help="fsync the write-ahead log before acknowledging. --no-fsync is faster but an OS crash "
                   "can lose acknowledged spans.")
def collect(lake_dir, grpc_addr, http_addr, token, token_file, tls_cert, tls_key, max_body_mib,
            max_buffered_spans, max_connections, flush_seconds, fsync):
    """Receive OTLP traces (gRPC and HTTP, protobuf and JSON) into the lake at --dir.

    A batch is acknowledged only once it is in the write-ahead log (LAKE/_wal) and fsynced;
    a background flusher turns the log into Parquet. After a crash the log is replayed at
    the next start. Retransmitted spans (same trace_id and span_id) are stored once.
    SIGTERM or SIGINT flushes and exits 0 within 20 s (4 when that last Parquet write fails
    or takes longer: the spans stay in the log for the next start). Prints one line per
    listener when ready.
    """
    from ..collect.receiver import Collector
    from ..collect.server import Receiver, check_tls, check_token, listen_addresses, read_token_file
    from ..collect.wal import WALLocked
    from ..lake.files import LakeError

    given = click.get_current_context().get_parameter_source("token")
    source = "--token" if given is click.core.ParameterSource.COMMANDLINE else "OTEL_ASSAY_TOKEN"
    try:
        if token_file is not None:
            if token is not None:
                raise ValueError(f"give the token once: --token-file and {source} are both set")
            token = read_token_file(token_file)
        elif token is not None:
            token = check_token(token, source)
        addrs = listen_addresses(grpc_addr, http_addr, token)
        check_tls(tls_cert, tls_key)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        collector = Collector(lake_dir, max_buffered_spans=max_buffered_spans, flush_seconds=flush_seconds, fsync=fsync)
    except WALLocked as e:
        raise UsageError(str(e)) from None
    except LakeError as e:
        raise DataError(str(e)) from None
    try:
        receiver = Receiver(collector, grpc_addr=addrs["grpc"], http_addr=addrs["http"], token=token,
                            tls_cert=tls_cert, tls_key=tls_key, max_body=int(max_body_mib * (1 << 20)),
                            max_connections=max_connections)
    except (OSError, RuntimeError) as e:
        collector.close()
        raise UsageError(f"cannot listen: {e}; pick a free port with --grpc/--http") from None
    stop = threading.Event()

    def _on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    receiver.start()
    if collector.replayed_spans:
        click.echo(f"otel-assay collect: replayed {collector.replayed_spans} spans from the write-ahead log")
    click.echo(f"otel-assay collect: writing to {os.path.abspath(lake_dir)}")
    for listener in receiver.listeners:
        click.echo(f"otel-assay collect: {listener.describe()}")
    sys.stdout.flush()
    while not stop.wait(0.5):
        pass
    # a stop that cannot finish (a disk that hangs every write) must not keep a supervisor
    # waiting: past the bound the process ends, and the log keeps what it acknowledged
    stopper = threading.Thread(target=receiver.stop, name="otel-assay-stop", daemon=True)
    stopper.start()
    stopper.join(STOP_SECONDS)
    if stopper.is_alive():
        click.echo(f"otel-assay collect: could not finish within {STOP_SECONDS} s of the signal; "
                   f"{collector.buffered_rows} acknowledged spans, events and links not yet in Parquet are "
                   f"written from the write-ahead log {collector.lake.wal_dir} at the next start", err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(4)  # threads stuck in the kernel would keep a normal exit waiting for ever
    st = collector.stats
    click.echo(f"otel-assay collect: stopped; {st.spans_accepted} spans accepted, {st.spans_written} written, "
               f"{st.spans_duplicate} duplicates dropped, {st.spans_rejected} rejected"
               + (f", {st.too_many_rows} requests refused for holding too many rows" if st.too_many_rows else ""))
    if collector.lost_spans:
        raise DataError(f"{collector.lost_spans} acknowledged spans could not be written: the lake directory "
                        f"{collector.lake.root} or its write-ahead log was deleted while the collector ran "
                        f"({st.last_flush_error}), so no copy is left on disk")
    if collector.unwritten_spans:
        # nothing is lost, but a supervisor that sees exit 0 would never tell anyone the
        # lake is missing acknowledged spans until the next start
        raise DataError(f"{collector.unwritten_spans} acknowledged spans could not be written to Parquet "
                        f"({st.last_flush_error}); they are kept in the write-ahead log "
                        f"{collector.lake.wal_dir} and are written when `otel-assay collect --dir {lake_dir}` "
                        "next starts: free the space (or fix the permissions) and start it again")


# ---------------------------------------------------------------------------- import
@click.command("import")
# readable=False: a path that cannot be read is a data error (exit 4) naming it, as in every command
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False))
@lake_option
@click.option("--max-decompressed-mib", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Read at most this much of a gzip or zstd file, decompressed (a small file can expand to "
                   "gigabytes). Past it the file is an error; the spans before it are imported.")
@click.option("--max-spans", type=click.IntRange(min=1), default=100_000_000, show_default=True,
              help="Read at most this many spans of one file (a genuine export holds far fewer; a hostile one "
                   "can hold billions). Past it the file is an error; the spans before it are imported (of a "
                   "file read in ranges, those each range read up to it).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Read this many files, or line ranges of a large JSON Lines file, at once, each in a "
                   "process of its own  [default: the cores otel-assay may use]")
@click.option("--quiet", "-q", is_flag=True, help="No progress (shown for imports of more than 8 MiB).")
def import_(paths, lake_dir, max_decompressed_mib, max_spans, jobs, quiet):
    """Import OTLP trace files into the lake at --dir.

    Each PATH is a file, or a directory: the files directly in it (not in its
    subdirectories), skipping with a note hidden files, files that are clearly not span
    exports (Parquet, text, empty) and the lake itself.

    Accepts OTLP JSON Lines (the OpenTelemetry Collector file exporter's default), a single
    OTLP JSON document (or several one after another), and OTLP protobuf, length-prefixed or
    one bare ExportTraceServiceRequest (as curl posts it); each may be gzip or zstd
    compressed, and the Collector file exporter's `compression: zstd` (each length-prefixed
    message compressed) is read too. Importing the same file twice
    stores its spans once. Exits 4 if any file, record or span could not be imported (the
    rest is still imported).
    """
    from ..collect.importer import expand_inputs, import_files
    from ..collect.workers import usable_cores
    from ..lake.files import LakeError

    inputs = expand_inputs(list(paths), lake_dir)
    if inputs.missing:
        raise DataError(f"no such file or directory: {', '.join(inputs.missing)}")
    if inputs.unreadable:
        raise DataError(f"cannot read {', '.join(inputs.unreadable)}; let the user running otel-assay read "
                        "it and run again")
    for note in inputs.skipped[:20]:
        click.echo(note)
    if len(inputs.skipped) > 20:
        click.echo(f"... and {len(inputs.skipped) - 20} more skipped")
    if not inputs.files:
        found = "see the notes above" if inputs.skipped else "the directories named are empty"
        raise DataError(f"no files to import ({found}): name OTLP trace files, or directories holding them")
    files = inputs.files
    total = sum(os.path.getsize(f) for f in files)
    options = dict(max_decompressed=max_decompressed_mib << 20, max_spans=max_spans,
                   jobs=jobs or usable_cores())
    try:
        if quiet or total <= 8 << 20:
            result = import_files(list(files), lake_dir, **options)
        elif sys.stderr.isatty():
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

            with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                          TextColumn("{task.fields[spans]:,} spans, {task.fields[rate]:,.0f}/s"),
                          TimeRemainingColumn(), transient=True) as prog:
                task = prog.add_task("importing", total=total, spans=0, rate=0.0)
                started = last = time.monotonic()
                spans = pending = 0

                def advance(nbytes: int, nspans: int) -> None:
                    # told after every record (a span each, from some exporters): the bar is
                    # updated ten times a second, not at every call
                    nonlocal spans, pending, last
                    spans += nspans
                    pending += nbytes
                    now = time.monotonic()
                    if now - last >= 0.1:
                        prog.update(task, advance=pending, spans=spans, rate=spans / (now - started))
                        pending, last = 0, now

                result = import_files(list(files), lake_dir, progress=advance, **options)
        else:
            result = import_files(list(files), lake_dir, progress=_ProgressLines(total), **options)
    except LakeError as e:
        raise DataError(str(e)) from None
    for f in result.files:
        if f.already_imported:
            click.echo(f"{f.path}: {f.format}, skipped: the same content was imported before "
                       f"(delete {f.already_imported} to import it again)")
            continue
        line = f"{f.path}: {f.format}, {f.spans_imported} spans imported"
        if f.spans_rejected:
            line += f", {f.spans_rejected} rejected"
        click.echo(line)
        if f.spans_already_in_lake:
            # typically a file the Collector has appended to since its last import: new content
            # to the ledger, so its earlier spans were stored again
            click.echo(f"  note: {f.spans_already_in_lake} of these spans were already in the lake (an earlier "
                       f"import of this file before it grew?) and are now stored twice; the steps view and those "
                       f"built on it count each span once, and `otel-assay compact --dir {shlex.quote(str(lake_dir))}` "
                       f"drops the copies")
        for why, n in sorted(f.reject_reasons.items(), key=lambda kv: -kv[1])[:10]:
            click.echo(f"  rejected {n}: {why}", err=True)
        for err in f.errors[:20]:
            click.echo(f"  error: {err}", err=True)
        if len(f.errors) > 20:
            click.echo(f"  ... and {len(f.errors) - 20} more errors", err=True)
    click.echo(f"imported {result.spans_imported} spans into {lake_dir}"
               + (f"; {result.spans_rejected} rejected" if result.spans_rejected else ""))
    if not result.ok:
        raise DataError("some input could not be imported (see above); the rest was imported. Importing the "
                        "same file again skips it if any of its spans were imported; a fixed file imports again, and "
                        "`otel-assay compact` then drops the spans stored twice")


class _ProgressLines:
    """Import progress as a line on stderr every 10 s, where no terminal shows a bar (a CI log)."""

    EVERY = 10.0

    def __init__(self, total: int):
        self.total, self.read, self.spans = total, 0, 0
        self.started = self.last = time.monotonic()

    def __call__(self, nbytes: int, nspans: int) -> None:
        self.read += nbytes
        self.spans += nspans
        now = time.monotonic()
        if now - self.last >= self.EVERY:
            self.last = now
            elapsed = now - self.started
            eta = elapsed * (self.total - self.read) / self.read if self.read else 0
            click.echo(f"importing: {self.read >> 20} of {self.total >> 20} MiB, {self.spans:,} spans "
                       f"({self.spans / elapsed:,.0f}/s), about {eta:.0f} s left", err=True)


# ---------------------------------------------------------------------------- compact
@click.command()
@lake_option
@click.option("--target-mib", type=click.IntRange(min=1), default=256, show_default=True,
              help="Merge a partition's files into files of about this size (on disk).")
@click.option("--grace-seconds", type=FiniteFloatRange(min=0), default=60, show_default=True,
              help="Keep replaced files this long so readers that listed them can finish.")
@click.option("--no-step-files", "step_files", flag_value=False, default=True,
              help="Do not write step files (the default writes one per span file that lacks one).")
def compact(lake_dir, target_mib, grace_seconds, step_files):
    """Merge the small files of each partition, dropping duplicate spans, and store each
    file's steps beside it (LAKE/steps/), so that analyses read them instead of computing
    them again: the costly part of every analysis of a large lake. Deleting LAKE/steps while
    no analysis runs only makes analyses slower; a step file that does not match its span
    file, or is damaged, is not read.

    Safe while a collector writes and readers read: a reader sees either the old files or
    the merged one, never both. Unreadable files are left alone and reported (exit 4). One
    compaction per lake at a time: a second one is refused (exit 3). A compaction that was
    killed loses nothing; the next one removes its temporary files.
    """
    from ..lake.files import Lake, LakeBusy, LakeError

    if not os.path.isdir(lake_dir):
        # the default (./traces) is easy to hit by accident: say how to name the lake
        raise DataError(f"lake directory {lake_dir} does not exist; pass the lake with --dir LAKE "
                        f"(or set OTEL_ASSAY_DIR)")
    try:
        r = Lake(lake_dir).compact(target_bytes=target_mib << 20, grace_seconds=grace_seconds)
    except LakeBusy as e:
        raise UsageError(str(e)) from None
    except LakeError as e:
        raise DataError(str(e)) from None
    click.echo(f"compacted {r.files_in} files into {r.files_out} ({r.rows_in} rows in, {r.rows_out} out, "
               f"{r.rows_in - r.rows_out} duplicates dropped); deleted {r.deleted_files} replaced files")
    unreadable = list(r.skipped)
    if step_files:
        from ..analyze.stepwrite import write_step_files

        try:
            sr = write_step_files(lake_dir, grace_seconds=grace_seconds)
        except LakeBusy as e:
            raise UsageError(str(e)) from None
        click.echo(f"step files: {len(sr.written)} written, {sr.kept} up to date, {sr.removed} removed"
                   + (f", {len(sr.no_trace_id)} span files left without (spans without a trace id)"
                      if sr.no_trace_id else ""))
        for p in sr.damaged:
            click.echo(f"  removed damaged step file {p}", err=True)
        if sr.failed:
            # a cache: the lake is whole, analyses compute these files' steps from their spans
            for f in sr.failed:
                click.echo(f"  could not write step file {f}", err=True)
            click.echo(f"warning: {len(sr.failed)} step files not written; analyses compute those steps from the "
                       "spans (slower, same results). Fix the cause (memory: OTEL_ASSAY_MEMORY_LIMIT; "
                       "permissions of LAKE/steps) and run compact again", err=True)
        unreadable += [s for s in sr.skipped if s not in unreadable]
    if unreadable:
        for s in unreadable:
            click.echo(f"  skipped {s}", err=True)
        raise DataError("unreadable files were left in place; move them out of the lake")


# ---------------------------------------------------------------------------- sql
class _SqlCommand(click.Command):
    """A query that opens with a ``--`` comment would be taken for an unknown option. No
    option name holds whitespace, so such an argument is SQL: a newline in front (SQL
    whitespace) makes click see it as the positional argument it is."""

    def parse_args(self, ctx, args):
        args = ["\n" + a if a.startswith("--") and any(c.isspace() for c in a.split("=", 1)[0]) else a
                for a in args]
        return super().parse_args(ctx, args)


@click.command(cls=_SqlCommand)
@click.argument("lake")
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Output format.")
def sql(lake, query, fmt):
    """Run a read-only SQL query over the lake's views.

    LAKE is a lake directory, a Parquet file or a glob. Views: spans, span_events,
    span_links and the analysis views (docs/analysis.md). The query cannot read or write other
    files.

    \b
    Example:
      otel-assay sql traces "SELECT name, count(*) FROM spans GROUP BY ALL"
    """
    from ..analyze.sql import query_lake
    from ..report.output import write_table

    write_table(query_lake(lake, query), fmt)


def register(group: click.Group) -> None:
    for command in (collect, import_, compact, sql):
        group.add_command(command)
