"""Collection: the lake schema and writer, the in-process exporter, the OTLP receiver, file import."""

from .exporter import ParquetSpanExporter
from .lake import Lake, LakeError

__all__ = ["ParquetSpanExporter", "Lake", "LakeError"]
