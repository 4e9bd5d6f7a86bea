"""The span lake: its tables (``schema``), the one row builder every reader fills
(``rows``), and its files on disk (``files``: naming, atomic writes, compaction, listing).

It knows nothing of where spans come from: the collectors (``otel_assay.collect``) read
spans into rows, the analyzers (``otel_assay.analyze``) read the files.
"""

from .files import Lake, LakeError
from .rows import SpanBatch
from .schema import DEFAULT_LIMITS, Limits

__all__ = ["Lake", "LakeError", "SpanBatch", "Limits", "DEFAULT_LIMITS"]
