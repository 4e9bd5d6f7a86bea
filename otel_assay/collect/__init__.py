"""Collection: readers that turn spans into lake rows — the in-process exporter
(``ParquetSpanExporter``), the OTLP receiver, file import.

``ParquetSpanExporter`` is loaded when it is first used: ``otel-assay import`` and the
receiver, which import modules of this package, would otherwise load the OpenTelemetry SDK
(0.04 s) at every start for an exporter they never use."""

__all__ = ["ParquetSpanExporter"]


def __getattr__(name: str):
    if name == "ParquetSpanExporter":
        from .exporter import ParquetSpanExporter

        return ParquetSpanExporter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
