"""What every job shares: the SparkSession, loading the cleaned events, writing results."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from spark_analysis.schema import (
    SCHEMA_VERSION,
    bad_line_counts,
    conform,
    read_events,
    with_metadata,
)

#: percentiles reported for every latency/duration (the OpenMessaging Benchmark's columns)
PCTS = (0.5, 0.95, 0.99, 0.999)
PCT_NAMES = ("p50", "p95", "p99", "p999")


#: a JVM option that picks a garbage collector (the JVM refuses to start with two)
_COLLECTOR = re.compile(r"-XX:\+Use\w+GC\b")


def _user_chose_collector() -> bool:
    """Whether the user's own settings, where `spark-submit` will read them
    (`PYSPARK_SUBMIT_ARGS`, spark-defaults.conf in `SPARK_CONF_DIR` or Spark's `conf/`), already
    pick a collector: `spark_session` then leaves its default out, or the JVM would not start."""
    from pyspark.find_spark_home import _find_spark_home

    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(_find_spark_home(), "conf")
    defaults = Path(conf_dir) / "spark-defaults.conf"
    text = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    if defaults.is_file():  # Spark skips its comment lines, and so does this
        text += "".join("\n" + line for line in defaults.read_text(errors="replace").splitlines()
                        if not line.lstrip().startswith("#"))
    return _COLLECTOR.search(text) is not None


def spark_session(master: str = "local[*]", app: str = "notify-analyze",
                  shuffle_partitions: int = 8, driver_memory: str | None = None) -> SparkSession:
    if master.startswith("local"):
        # The Python workers (whatif's replay runs there) must be this interpreter, which has
        # the project and pandas, not whatever `python3` is first on PATH. On a cluster the
        # executors' Python is the cluster's (docs/analysis.md: shipping the project there).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.adaptive.enabled", "true"))
    if master.startswith("local") and not _user_chose_collector():
        # Local mode runs the executors in the driver's JVM, and the jobs are batch work that
        # wants throughput, not short pauses: the parallel collector took 3 % off the 10 M
        # report (290 s against 296-305 s, back to back; load and check gain the most). Set as
        # the *default* options, which Spark puts before `extraJavaOptions`: a user's own
        # (spark-defaults.conf) are kept, where setting `extraJavaOptions` would replace them.
        b = b.config("spark.driver.defaultJavaOptions", "-XX:+UseParallelGC")
    if driver_memory:
        b = b.config("spark.driver.memory", driver_memory)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass
class Events:
    """The cleaned events (a Parquet table, or parsed JSON in a cache), with what validation
    found."""

    df: DataFrame
    bad_lines: dict[str, int]
    source: str
    _span: tuple[float, float] | None = None

    def span(self) -> tuple[float, float]:
        """The first and the last event's ts (one pass for both: churn wants the log's length,
        whatif and churn how long a gap that never closed has lasted)."""
        if self._span is None:
            r = one(self.df.agg(F.min("ts"), F.max("ts")))
            self._span = (float(r[0] or 0.0), float(r[1] or 0.0))
        return self._span

    def end_ts(self) -> float:
        """When the log ends (the last event's ts): how long a gap that never closed has lasted."""
        return self.span()[1]

    def of(self, *names: str) -> DataFrame:
        return self.df.where(F.col("event").isin(list(names)))


def one(df: DataFrame) -> Row:
    """The row of a global aggregate (no grouping), which Spark gives exactly once, even over
    no rows at all."""
    r = df.first()
    if r is None:
        raise ValueError("a global aggregate gave no row")
    return r


def _is_parquet(path: Path) -> bool:
    return path.is_dir() and any(path.rglob("*.parquet"))


def load_events(spark: SparkSession, logs: str, out: str | None = None) -> Events:
    """JSONL logs (validated; bad lines counted) or a stored Parquet events table.

    With `out`, JSONL input is written once to `out/events` (Parquet, the cleaned table that later
    runs and other tools can reuse) and the jobs read it from there: a columnar scan is far
    cheaper than parsing the JSON again for every job. The bad lines are counted while that table
    is written (or, without `out`, while the cache is built): one pass over the JSON.

    A Parquet table is not cached: each job scans the few columns and, the rows being sorted by
    event, the few row groups it reads, and the jobs that read a family more than once (check's
    deliveries, whatif's replay input) cache what they read. Caching the whole table cost more
    than it saved (10 M events: load 31 s longer, check 12 s shorter)."""
    src = Path(logs)
    if _is_parquet(src):
        return Events(conform(spark.read.parquet(str(src))), {}, "parquet")
    df, bad = read_events(spark, str(src))
    if out is None:
        ev = Events(df.cache(), {}, "jsonl")
        ev.span()  # builds the cache, observing the bad lines while it parses
    else:
        target = Path(out) / "events"
        # sorted by event within each file: a job reads a few event families, and with the
        # rows of one family together the row groups of the others are skipped by their min/max
        # statistics instead of scanned
        with_metadata(df).sortWithinPartitions("event").write.mode("overwrite").parquet(
            str(target))
        ev = Events(conform(spark.read.parquet(str(target))), {}, "jsonl")
    ev.bad_lines = bad_line_counts(bad)
    return ev


@dataclass
class JobResult:
    """What a job produced: tables (small, written as Parquet) and a JSON-able summary."""

    name: str
    tables: dict[str, DataFrame] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: float = 0.0

    def collect(self) -> JobResult:
        """Materialise every table once (they are aggregates: small)."""
        for name, df in self.tables.items():
            self.rows[name] = [r.asDict(recursive=True) for r in df.collect()]
        return self

    def write(self, out: str | Path) -> Path:
        d = Path(out) / self.name
        d.mkdir(parents=True, exist_ok=True)
        spark = SparkSession.getActiveSession()
        for name, rows in self.rows.items():
            df = self.tables[name]
            if spark is not None:  # rewrite from the collected rows: no second computation
                df = spark.createDataFrame(rows, schema=df.schema) if rows else df.limit(0)
            with_metadata(df).coalesce(1).write.mode("overwrite").parquet(str(d / name))
        summary = {"job": self.name, "schema_version": SCHEMA_VERSION,
                   "seconds": round(self.seconds, 3), **self.summary}
        (d / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        return d


#: the DataFrames the running job cached for itself (`job_cache`); `timed` releases them
_JOB_CACHES: ContextVar[list[DataFrame] | None] = ContextVar("job_caches", default=None)


def job_cache(df: DataFrame) -> DataFrame:
    """`df.cache()` for the running job only: released once its tables are collected, or when
    it fails, so that a session that runs many jobs (the tests, a notebook) holds none of them."""
    caches = _JOB_CACHES.get()
    if caches is None:
        raise RuntimeError("job_cache is for a @timed job's own tables")
    df = df.cache()
    caches.append(df)
    return df


def timed(fn: Any) -> Any:
    """A job: its tables collected (they are small) and its run time taken, then the caches it
    made for itself (`job_cache`) released, whether it returned or failed."""
    def run(*args: Any, **kw: Any) -> JobResult:
        t0 = time.perf_counter()
        caches: list[DataFrame] = []
        token = _JOB_CACHES.set(caches)
        try:
            r: JobResult = fn(*args, **kw)
            r.collect()
        finally:
            _JOB_CACHES.reset(token)
            for df in caches:
                df.unpersist()
        r.seconds = time.perf_counter() - t0
        return r
    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def pct_cols(col: str, prefix: str = "") -> list[Column]:
    """p50/p95/p99/p99.9 (approximate, one pass) and max of `col`, for an aggregation."""
    p = F.percentile_approx(col, list(PCTS), 10000)
    return ([p[i].alias(prefix + n) for i, n in enumerate(PCT_NAMES)]
            + [F.max(col).alias(prefix + "max"), F.count(col).alias(prefix + "count")])
