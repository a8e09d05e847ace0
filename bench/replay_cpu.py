"""CPU seconds of the compiled what-if replay on a fixed sample of random timelines (those of
tests/unit/replay_sample.py), to compare two trees (each with its compiled replay built:
`./dev compile`).

    PYTHONPATH=$PWD python bench/replay_cpu.py [--groups 600] [--repeat 3]
    python bench/replay_cpu.py --pair TREE_A TREE_B [--groups 200] [--rounds 20]

The first prints one line per repeat: whether the compiled modules ran, the CPU seconds (user +
sys of this process, `time.process_time`) and a digest of the outcomes (the same digest in two
trees: their replays agreed). Run it in each tree alternately.

`--pair` does that alternation itself, for a machine others share: one process per tree (this
script, with `PYTHONPATH` set to the tree), both kept running, asked in turn (A B, then B A, ...)
to replay the same sample once per round after a warm-up round. Neighbouring runs see about the
same load, so the ratio of each pair says more than the totals; it prints both, and refuses
outcomes that differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def worker(groups: int, repeat: int, serve: bool) -> None:
    from spark_analysis import compiled_replay

    status = compiled_replay.activate()
    sys.path.insert(0, str(HERE.parents[1] / "tests" / "unit"))
    from replay_sample import CANDIDATES, sample_timeline

    from spark_analysis.replay import Candidate, replay_candidates

    rng = random.Random(1)
    timelines = [sample_timeline(rng) for _ in range(groups)]
    cands = [Candidate.of(t, 0.01) for t in CANDIDATES]

    def once() -> tuple[float, str]:
        rows = []
        t0 = time.process_time()
        for g, steps in enumerate(timelines):
            for o, _ in replay_candidates(f"g{g}", steps, cands, steps[-1].ts + 40.0):
                rows.append(o.as_dict())
        cpu = time.process_time() - t0
        return cpu, hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:12]

    if serve:  # --pair's worker: one replay per line read
        print(f"ready compiled={status.compiled}", flush=True)
        for _ in sys.stdin:
            cpu, digest = once()
            print(f"{cpu:.4f} {digest}", flush=True)
        return
    for _ in range(repeat):
        cpu, digest = once()
        print(f"compiled={status.compiled} cpu_s={cpu:.3f} groups={groups} outcomes={digest}",
              flush=True)


def pair(trees: list[str], groups: int, rounds: int) -> int:
    procs = {}
    for t in trees:
        env = {**os.environ, "PYTHONPATH": str(Path(t).resolve())}
        procs[t] = subprocess.Popen(
            [sys.executable, str(HERE), "--worker", "--groups", str(groups)], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert procs[t].stdout is not None
        print(t, procs[t].stdout.readline().strip(), flush=True)
    cpu: dict[str, list[float]] = {t: [] for t in trees}
    digests = set()
    for r in range(rounds + 1):  # round 0 warms up
        for t in trees if r % 2 == 0 else trees[::-1]:
            p = procs[t]
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write("go\n")
            p.stdin.flush()
            secs, digest = p.stdout.readline().split()
            digests.add(digest)
            if r:
                cpu[t].append(float(secs))
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    a, b = trees
    for t in trees:
        print(f"{t}: {sum(cpu[t]):.2f} CPU-s in {rounds} rounds, "
              f"median {statistics.median(cpu[t]):.3f}, min {min(cpu[t]):.3f}")
    ratios = [y / x for x, y in zip(cpu[a], cpu[b], strict=True)]
    print(f"B/A: median of the {rounds} pairs {statistics.median(ratios):.3f}, "
          f"totals {sum(cpu[b]) / sum(cpu[a]):.3f}; outcomes {' '.join(sorted(digests))}")
    return 0 if len(digests) == 1 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--pair", nargs=2, metavar="TREE")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.pair:
        return pair(a.pair, a.groups or 200, a.rounds)
    worker(a.groups or 600, a.repeat, a.worker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
