"""`notify-analyze whatif --compiled` as a user runs it: the same candidates table whether the
executors replay the compiled modules or the sources, and the summary says which ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from spark_analysis import compiled_replay

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

#: what differs between two runs of the same replay: its cost, and which code paid it
COST = ["replay_cpu_s", "compiled_groups"]


def _whatif(logs: Path, out: Path, compiled: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_analysis.cli", "whatif", "--logs", str(logs), "--out",
         str(out), "--master", "local[2]", "--current", "0.15", "--no-parquet", "--compiled",
         compiled], env={**os.environ, **(env or {})}, capture_output=True, text=True,
        timeout=240, cwd=compiled_replay.ROOT)


def test_compiled_and_pure_whatif_write_the_same_candidates(fleet_logs: tuple[Path, dict],
                                                            tmp_path: Path) -> None:
    st = compiled_replay.status()
    if not st.compiled:
        if os.environ.get("NOTIFY_REQUIRE_COMPILED") == "1":
            pytest.fail(f"the compiled replay is required here: {st.reason}")
        pytest.skip(f"the compiled replay is not built: {st.reason}")
    logs, _ = fleet_logs
    tables, summaries = {}, {}
    for mode in ("yes", "no"):
        r = _whatif(logs, tmp_path / mode, mode)
        assert r.returncode == 0, r.stderr[-3000:]
        summaries[mode] = json.loads((tmp_path / mode / "whatif" / "summary.json").read_text())
        tables[mode] = pd.read_parquet(tmp_path / mode / "whatif" / "candidates")
    assert summaries["yes"]["replay_code"] == "compiled (mypyc)"
    assert summaries["no"]["replay_code"] == "pure Python (--compiled no)"
    yes, no = tables["yes"], tables["no"]
    groups = int(yes["groups"].max())
    assert groups > 0 and (yes["compiled_groups"] == yes["groups"]).all()
    assert (no["compiled_groups"] == 0).all()
    assert yes["view_changes"].sum() > 0
    pd.testing.assert_frame_equal(yes.drop(columns=COST), no.drop(columns=COST))


def test_compiled_yes_without_a_usable_build_is_a_clear_error(fleet_logs: tuple[Path, dict],
                                                              tmp_path: Path) -> None:
    logs, _ = fleet_logs
    r = _whatif(logs, tmp_path / "out", "yes", env={"NOTIFY_COMPILED_DIR": str(tmp_path)})
    assert r.returncode == 2
    assert "--compiled yes: the compiled replay cannot run: not built" in r.stderr
    assert "./dev compile" in r.stderr
    assert not (tmp_path / "out").exists()  # refused before any work
