"""Collection: readers that turn spans into lake rows — the in-process exporter
(``exporter.ParquetSpanExporter``), the OTLP receiver, file import.

Nothing is imported here: ``otel-assay import`` would pay for the OpenTelemetry SDK, which
only the exporter needs, at every start."""
