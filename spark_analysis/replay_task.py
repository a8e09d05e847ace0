"""What the executors run for `whatif --method replay`: one group's facts in, one outcome row
per candidate out.

Kept apart from whatif.py, and importing none of the replay's modules at the top, because the
executors must get the chance to load the compiled ones (compiled_replay.py) before anything
imports the sources: Spark unpickles the task by importing this module.
"""

from __future__ import annotations

import pandas as pd

from spark_analysis import compiled_replay


def replay_group(pdf: pd.DataFrame, *, end: float, flush_rtt: float,
                 candidates: tuple[float, ...], compiled: bool) -> pd.DataFrame:
    """One group: its facts -> its timeline -> one `Outcome` row per candidate (runs on the
    executors: the project's package must be importable there, see docs/analysis.md). The
    facts are read and the timeline built once for all the candidates, and candidates whose
    replays are provably the same share one (`replay.replay_candidates`). `compiled`: load the
    compiled modules if this process can. Each row says which code ran: a Python worker that
    Spark reuses keeps what it loaded first (a session that asks for both gets one of them)."""
    if compiled:
        compiled_replay.activate()
    from spark_analysis.replay import Candidate, replay_candidates, start_of, timeline

    ran_compiled = compiled_replay.loaded()

    group = str(pdf["group"].iloc[0])
    pdf = pdf.sort_values("ts", kind="stable")
    views, installs, conns, asks, atomics = [], [], [], [], []
    for ts, kind, member, members, installed in zip(pdf["ts"].tolist(), pdf["kind"].tolist(),
                                                    pdf["member"].tolist(),
                                                    pdf["members"].tolist(),
                                                    pdf["installed"].tolist(), strict=True):
        if kind == "view":
            views.append((float(ts), tuple(members)))
            installs.append((float(installed), tuple(members)))
        elif kind in ("drop", "return"):
            conns.append((float(ts), kind, str(member)))
        elif kind == "publish":
            atomics.append((float(ts), str(member)))
        else:
            asks.append((float(ts), kind, str(member)))
    steps = timeline(views, conns, asks, atomics)
    start = start_of(sorted(installs), conns)
    outs = replay_candidates(group, steps, [Candidate.of(t, flush_rtt) for t in candidates],
                             end, start)
    return pd.DataFrame([{"group": group, "timeout_s": t, **o.as_dict(),
                          "replayed": cpu is not None, "replay_cpu_s": cpu or 0.0,
                          "compiled": ran_compiled}
                         for t, (o, cpu) in zip(candidates, outs, strict=True)])
