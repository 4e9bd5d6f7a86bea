"""A scripted retrieval agent recorded through the real trial API, with metamorphic follow-ups.

v1 reads every document and answers with the majority label (order-invariant);
v2 answers from the first document only (changes its answer when the documents are permuted).
Usage: python mr_agent.py LAKE PAIRS
"""

import random
import sys

import otel_assay
from otel_assay.metamorphic import follow_up, permute_documents

lake, pairs = sys.argv[1], int(sys.argv[2])
otel_assay.capture.use_lake(lake) if hasattr(otel_assay, "capture") else None


def agent(version: str, docs: list[str]) -> str:
    with otel_assay.step("retrieve", kind="tool", arguments={"n": len(docs)}) as s:
        s.result(docs)
    label = max(set(docs), key=docs.count) if version == "v1" else docs[0]
    with otel_assay.step("scripted-model", kind="llm", model="scripted") as s:
        s.usage(input_tokens=50, output_tokens=5, finish_reasons=["stop"])
        s.result(f"The answer is {label}.")
    return label


rng = random.Random(4)
for version in ("v1", "v2"):
    for i in range(pairs):
        docs = ["refund"] * 3 + ["exchange"] * 2
        rng.shuffle(docs)
        with otel_assay.trial("lookup", version=version) as src:
            src.outcome(passed=agent(version, docs) == "refund")
        with otel_assay.trial("lookup", version=version,
                              attributes=follow_up("doc-order", src, "permute_documents")) as fu:
            fu.outcome(passed=agent(version, permute_documents(docs, seed=i)) == "refund")
otel_assay.flush()
