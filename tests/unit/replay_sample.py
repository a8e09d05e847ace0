"""Replays a fixed sample of random timelines and prints the outcomes as JSON, with which code
ran them: tests/unit/test_compiled_replay.py runs it once on the sources and once on the
compiled modules (a process can hold only one of them) and compares.

    python tests/unit/replay_sample.py SEED GROUPS   # NOTIFY_COMPILED=0: the sources
"""

from __future__ import annotations

import json
import random
import sys

from spark_analysis import compiled_replay

STATUS = compiled_replay.activate()

from spark_analysis.replay import Candidate, Step, replay_candidates  # noqa: E402

MEMBERS = ("a", "b", "c", "d", "e", "f")
SPACINGS = (0.0, 0.002, 0.01, 0.012, 0.3, 0.9, 1.0, 2.0, 3.0, 3.02, 6.0, 11.0, 31.0)
KINDS = ("drop", "return", "drop", "return", "publish", "leave", "join")
CANDIDATES = (0.5, 1.0, 3.0, 5.0, 10.0, 30.0)


def sample_timeline(rng: random.Random) -> list[Step]:
    """Joins, then drops, returns, atomic messages, leaves and rejoins at spacings around a
    flush round trip and around the candidates (as tests/unit/test_replay.py's strategy)."""
    members = MEMBERS[:rng.randint(2, len(MEMBERS))]
    steps = [Step(float(i), "join", m) for i, m in enumerate(members)]
    ts = 10.0
    for _ in range(rng.randint(1, 60)):
        ts += rng.choice(SPACINGS)
        steps.append(Step(round(ts, 6), rng.choice(KINDS), rng.choice(members)))
    return steps


def main() -> None:
    seed, groups = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    rows = []
    for g in range(groups):
        steps = sample_timeline(rng)
        cands = [Candidate.of(t, 0.01) for t in CANDIDATES]
        for t, (o, _) in zip(CANDIDATES, replay_candidates(f"g{g}", steps, cands,
                                                           steps[-1].ts + 40.0), strict=True):
            rows.append({"group": g, "timeout_s": t, **o.as_dict()})
    import notify.core.hub

    print(json.dumps({"compiled": STATUS.compiled, "reason": STATUS.reason,
                      "hub": notify.core.hub.__file__, "rows": rows}))


if __name__ == "__main__":
    main()
