"""Input transforms for metamorphic testing, and the attributes that link a follow-up trial.

A metamorphic relation says how an agent's behaviour should (not) change when its input is
transformed: reordering the documents it is given should not change its answer, a typo in
the question should not change which tools it calls. Run the source trial, transform its
input, run the follow-up trial with :func:`follow_up` attributes, and ``otel-assay
metamorphic`` checks the relation offline on the recorded pairs::

    with otel_assay.trial("refund", version="v2") as src:
        a = agent(question, docs)
    with otel_assay.trial("refund", version="v2",
                          attributes=follow_up("doc-order", src, "permute_documents")):
        b = agent(question, permute_documents(docs, seed=1))

Every transform is deterministic given its seed.
"""

from __future__ import annotations

import random
import string
from typing import Any, Sequence, TypeVar

from . import semconv

T = TypeVar("T")


def follow_up(relation: str, source: Any, transform: str) -> dict[str, str]:
    """Attributes for a follow-up trial: the relation's name, its source trial, the transform.

    ``source`` is the source :class:`Trial` (after its block) or its trace id (hex).
    """
    trace_id = getattr(source, "trace_id", source)
    if not isinstance(trace_id, str) or len(trace_id) != 32:
        raise ValueError("follow_up: source must be a finished trial or its 32-hex-digit trace id")
    return {semconv.ASSAY_MR_RELATION: relation, semconv.ASSAY_MR_SOURCE: trace_id.lower(),
            semconv.ASSAY_MR_TRANSFORM: transform}


def permute_documents(documents: Sequence[T], seed: int = 0) -> list[T]:
    """The documents in another order (never the same order, when there are two or more)."""
    docs = list(documents)
    if len(docs) < 2:
        return docs
    rng = random.Random(seed)
    out = docs[:]
    while out == docs:
        rng.shuffle(out)
    return out


def permute_tools(tools: Sequence[T], seed: int = 0) -> list[T]:
    """The tool list in another order: tool choice should not depend on declaration order."""
    return permute_documents(tools, seed)


def inject_noise(text: str, rate: float = 0.05, seed: int = 0) -> str:
    """Typos at ``rate`` per letter: swapped neighbours, dropped or doubled letters."""
    if not 0 <= rate <= 1:
        raise ValueError("rate must be in [0, 1]")
    rng = random.Random(seed)
    chars = list(text)
    out: list[str] = []
    i = 0
    while i < len(chars):
        c = chars[i]
        if c in string.ascii_letters and rng.random() < rate:
            op = rng.randrange(3)
            if op == 0 and i + 1 < len(chars):
                out += [chars[i + 1], c]
                i += 2
                continue
            if op == 1:
                i += 1
                continue
            out += [c, c]
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def truncate(text: str, fraction: float = 0.5) -> str:
    """The first ``fraction`` of the text, cut at a word boundary where there is one."""
    if not 0 <= fraction <= 1:
        raise ValueError("fraction must be in [0, 1]")
    cut = int(len(text) * fraction)
    head = text[:cut]
    if cut < len(text) and " " in head:
        head = head.rsplit(" ", 1)[0]
    return head
