"""CPU seconds of the compiled what-if replay on a fixed sample of random timelines (those of
tests/unit/replay_sample.py), to compare two trees: run it in each, alternately, with
`PYTHONPATH` set to the tree (and its compiled replay built: `./dev compile`).

    PYTHONPATH=$PWD python bench/replay_cpu.py [--groups 600] [--seed 1] [--repeat 1]

Prints one line per repeat: which code ran (compiled or not), CPU seconds (user+sys of this
process, `time.process_time`) and a digest of the outcomes (the same digest on both sides says
the replays agreed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

from spark_analysis import compiled_replay

STATUS = compiled_replay.activate()

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
from replay_sample import CANDIDATES, sample_timeline  # noqa: E402

from spark_analysis.replay import Candidate, replay_candidates  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    timelines = [sample_timeline(rng) for _ in range(a.groups)]
    cands = [Candidate.of(t, 0.01) for t in CANDIDATES]
    for _ in range(a.repeat):
        rows = []
        t0 = time.process_time()
        for g, steps in enumerate(timelines):
            for o, _ in replay_candidates(f"g{g}", steps, cands, steps[-1].ts + 40.0):
                rows.append(o.as_dict())
        cpu = time.process_time() - t0
        digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:12]
        print(f"compiled={STATUS.compiled} cpu_s={cpu:.3f} groups={a.groups} outcomes={digest}",
              flush=True)


if __name__ == "__main__":
    main()
