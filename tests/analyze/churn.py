"""Keep a lake changing the way a busy one does, until killed: write two small files of new
trials, then run the real `otel-assay compact --grace-seconds 0`, which merges them with the
partition's merged file and deletes the files it replaced at once; again and again. Each
compaction that merged files appends a line to COUNTER.

    python -m tests.analyze.churn LAKE COUNTER
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

from .lakes import span, write_lake


def main(lake: Path, counter: Path) -> None:
    attrs = {"assay.scenario": "s1", "assay.agent.version": "v1", "assay.trial.outcome": "pass"}
    for n in itertools.count(1):
        for k in range(2):
            trace = 1000 * n + k
            write_lake(lake, [span(trace, 1, None, "assay.trial s1", 0, 10, attrs),
                              span(trace, 2, 1, "chat", 1, 2, {**attrs, "gen_ai.operation.name": "chat"})],
                       token=f"churn{n}-{k}")
        p = subprocess.run([sys.executable, "-m", "otel_assay", "compact", "--dir", str(lake), "--grace-seconds", "0"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"compact failed: {p.stderr}")
        with open(counter, "a") as f:
            f.write(p.stdout.splitlines()[0] + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
