"""otel-assay: did this change make my agent worse?

OpenTelemetry spans -> a Parquet span lake -> DuckDB views -> statistics -> a CI gate.
"""

__version__ = "0.1.0"
