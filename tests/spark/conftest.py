"""One SparkSession on local[1] for the whole session, and one short seeded fleet run against a
real server (bench/fleet.py) whose logs the tests analyse. Both are torn down at the end."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="the analysis extra is not installed")

if shutil.which("java") is None:  # ./dev test installs it; a bare pytest run may lack it
    pytest.skip("no java on PATH", allow_module_level=True)

from pyspark.sql import SparkSession  # noqa: E402

from bench.fleet import FleetConfig, run_fleet  # noqa: E402
from spark_analysis.common import spark_session  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    s = spark_session("local[1]", app="notify-analyze-tests", shuffle_partitions=2)
    yield s
    s.stop()


FLEET = FleetConfig(clients=8, groups=2, groups_per_client=2, duration=8.0, compression=20.0,
                    seed=7, session_mean=40.0, handoff_p=0.7, sleep_mean=20.0, gone_p=0.1,
                    publish_rate=1.0, leave_p=0.15, suspect_timeout=0.15)


@pytest.fixture(scope="session")
def fleet_logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("fleet")
    summary = asyncio.run(run_fleet(FLEET, out))
    return out / "logs", summary
