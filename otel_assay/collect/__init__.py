"""Collection: readers that turn spans into lake rows — the in-process exporter, the OTLP
receiver, file import."""

from .exporter import ParquetSpanExporter

__all__ = ["ParquetSpanExporter"]
