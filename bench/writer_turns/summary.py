"""Sums what ``sitecustomize`` wrote over the seconds of the chain scenario (those in
which steps were voted or set): ``python -m bench.writer_turns.summary FILE...``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def summarize(path: Path) -> None:
    data: dict[str, Any] = json.loads(path.read_text())
    turns: dict[str, dict[str, list[float]]] = data["turns"]
    chain = sorted(int(s) for s, rows in turns.items() if any("steps/endpoints" in c for c in rows))
    if not chain:
        print(f"{path}: no chain scenario")
        return
    first, last = chain[0], chain[-1]

    def within(second: str) -> bool:
        return first <= int(second) <= last

    callers: dict[str, list[float]] = {}
    for s, rows in turns.items():
        if within(s):
            for who, row in rows.items():
                total = callers.setdefault(who, [0, 0.0, 0.0])
                for i in range(3):
                    total[i] += row[i]
    commits = [sum(row[i] for s, row in data["commits"].items() if within(s)) for i in range(3)]
    busy = sum(n for s, n in data["busy"].items() if within(s))
    print(
        f"{path}: seconds {first}-{last}, commits {commits[0]:.0f}, writers' blocks "
        f"{commits[1]:.0f}, commit s {commits[2]:.3f}, busy retries {busy}"
    )
    for who, (n, waited, held) in sorted(callers.items(), key=lambda kv: -kv[1][2]):
        print(f"  {n:6.0f} waited {waited:7.3f} s held {held:6.3f} s  {who}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        summarize(Path(name))
