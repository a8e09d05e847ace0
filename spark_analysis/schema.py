"""The delivery event-log schema (DESIGN §6), versioned, and the validating reader.

Every line of a server or client event log is one JSON object with the common fields `ts`, `event`,
`node` and (mostly) `group`, `member`, `session`, `view`, plus the event's own fields. The jobs
read all events into one wide table whose columns are the union of every event's fields
(`EVENT_SCHEMA`); a field an event does not carry is null.

Validation on read (never fatal, DESIGN §6): a line is *bad* when it is not a JSON object, when
`ts`, `event` or `node` is missing or has the wrong type, when `event` is not one this schema
version knows, or when a field that event requires is missing. Bad lines are counted per reason
and kept out of the cleaned table; `read_events` returns the counts with the table.

`SCHEMA_VERSION` changes whenever a column is added, removed or changes type; it is written
into every Parquet file's metadata (`notify.schema_version`) and into each job's summary, so a
later run can tell which schema a stored table has. Adding an event or an optional field is a
minor change (the reader of version 1.x reads every 1.y table).

Version history:
- 1.0: DESIGN §6 events.
- 1.1: optional client fields `n` (per-client delivery index, a tie-breaker for `recv_ts`),
  `atomic` and `msg_view` (the view stamped on the message) on `client.deliver`; `members`,
  `removed` on `client.view`; `previous` on `view.install` (what the server writes).
- 1.2: `client.reset` (the SDK rejoined a group afresh after the server refused its resume
  point: `reason`, `from_offset`, `offset`; the client's deliveries have a gap there).
- 1.3: `client.join`, `client.leave` (`group`): when the application asked to join or leave a
  group (bench/fleet.py writes them), the inputs `whatif --method replay` replays.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

SCHEMA_VERSION = "1.3"

_STR, _DBL, _LONG, _BOOL = T.StringType(), T.DoubleType(), T.LongType(), T.BooleanType()
_STRS = T.ArrayType(T.StringType())

#: column -> type; the union of every event's fields.
COLUMNS: dict[str, T.DataType] = {
    # common
    "ts": _DBL, "event": _STR, "node": _STR, "group": _STR, "member": _STR, "session": _STR,
    "view": _LONG,
    # server
    "code": _STR, "reason": _STR, "resumed": _BOOL, "gap_ms": _DBL, "proposed": _LONG,
    "members": _STRS, "duration_ms": _DBL, "previous": _LONG, "cancelled": _LONG,
    "offset": _LONG, "stream": _STR, "seq": _LONG, "sender": _STR, "order": _STR,
    "atomic": _BOOL, "bytes": _LONG, "source": _STR, "from_offset": _LONG, "count": _LONG,
    # client
    "sent_ts": _DBL, "recv_ts": _DBL, "n": _LONG, "msg_view": _LONG, "removed": _BOOL,
}

#: event -> fields it must carry besides ts/event/node (what the checks and jobs rely on).
EVENTS: dict[str, tuple[str, ...]] = {
    "conn.open": ("member",),
    "conn.close": ("member",),
    "member.suspect": ("group", "member"),
    "member.resume": ("group", "member", "gap_ms"),
    "view.propose": ("group", "proposed"),
    "view.install": ("group", "view", "members"),
    "view.resume": ("group", "view"),
    "msg.accept": ("group", "offset", "stream", "seq", "sender"),
    "msg.reject": ("group", "code"),
    "atomic.commit": ("group", "offset"),
    "atomic.abort": ("group", "offset"),
    "state.transfer": ("group",),
    "checkpoint.stored": ("group", "member"),
    "catchup": ("group", "member"),
    "client.deliver": ("group", "member", "offset", "stream", "seq", "sender", "recv_ts"),
    "client.view": ("group", "member", "view"),
    "client.disconnect": ("member",),
    "client.reconnect": ("member", "gap_ms"),
    "client.state_served": ("group", "member"),
    "client.checkpoint": ("group", "member"),
    "client.reset": ("group", "member", "reason"),
    "client.join": ("group", "member"),
    "client.leave": ("group", "member"),
}

#: every reason `parse_lines` can give for a bad line (`BLANK`, no bad line, is not one): a
#: finite set, so that `read_events` can count them all in one observed aggregate while the
#: cleaned table is written
BAD_REASONS: tuple[str, ...] = (
    "not_json", "missing_or_mistyped_common", "unknown_event",
    *sorted({f"missing_{f}" for fields in EVENTS.values() for f in fields}))

EVENT_SCHEMA = T.StructType([T.StructField(k, v, True) for k, v in COLUMNS.items()])


def _field_order() -> list[str]:
    """Every required field once, in an order that keeps each event's own order of `EVENTS`
    (a topological order of their tuples; it exists while no two events list two fields in
    opposite orders, which the assertion checks)."""
    fields = list(dict.fromkeys(f for fs in EVENTS.values() for f in fs))
    after = {f: {a for fs in EVENTS.values() for i, a in enumerate(fs) if f in fs[i + 1:]}
             for f in fields}  # the fields that must come before f
    order: list[str] = []
    while len(order) < len(fields):
        ready = [f for f in fields if f not in order and after[f] <= set(order)]
        assert ready, "EVENTS list two required fields in opposite orders"
        order.append(ready[0])
    return order


def _required_missing() -> Column:
    """The name of the first required field that is null for the row's event, else null.

    One test per field (null, and required by this event) in an order that agrees with every
    event's list, rather than one branch per event: the same answer for a third of the cost
    (1 M lines: about 2 CPU-s against 6, where parsing the JSON itself takes 9)."""
    return F.coalesce(*[F.when(F.col(f).isNull()
                               & F.col("event").isin([e for e, fs in EVENTS.items() if f in fs]),
                               F.lit(f"missing_{f}"))
                        for f in _field_order()], F.lit(None).cast(_STR))


#: `_bad` of an empty line or one of spaces only (what `trim` removes): left out, counted as nothing
BLANK = "blank"


def parse_lines(lines: DataFrame) -> DataFrame:
    """Lines (`value` column) -> the wide table plus a `_bad` column (reason, or null if good).

    A blank line is told apart only among the lines that failed to parse (`BLANK`), not by a
    filter in front of the parse: trimming every line copied it, about 3.5 of the 2 cores'
    seconds of a 10 M log's load, for the few lines that are blank."""
    parsed = lines.select(F.from_json("value", EVENT_SCHEMA, {"mode": "PERMISSIVE"}).alias("e"),
                          F.col("value"))
    known = F.col("event").isin(list(EVENTS))
    # from_json yields null fields for a line that is not JSON or has a mistyped field; telling
    # "not JSON" from "wrong type" would need a second parse, so both count as invalid_json
    # unless the line at least starts like an object.
    line = F.trim("_line")
    bad = (F.when(F.col("ts").isNull() | F.col("event").isNull() | F.col("node").isNull(),
                  F.when(line == "", F.lit(BLANK))
                  .when(line.startswith("{"), F.lit("missing_or_mistyped_common"))
                  .otherwise(F.lit("not_json")))
           .when(~known, F.lit("unknown_event"))
           .otherwise(_required_missing()))
    return parsed.select("e.*", F.col("value").alias("_line")).withColumn(
        "_bad", bad).drop("_line")


def read_events(spark: SparkSession, logs: str) -> tuple[DataFrame, Observation]:
    """Read every `*.jsonl*` file under `logs` (rotated files included).

    Returns (events, bad): the cleaned events, and an `Observation` of the bad lines per reason
    (`bad_line_counts` reads it). The counts are taken by the first action over `events` (the
    write of the cleaned table, or building its cache), so the JSON is parsed once and the wide
    parsed rows are never stored: persisting them for a separate counting pass cost more than
    the parse (10 M lines: 33 columns spilled to disk)."""
    lines = (spark.read.option("recursiveFileLookup", "true")
             .option("pathGlobFilter", "*.jsonl*").text(logs))
    # (no `where` on the parsed columns before `observe`: the optimizer pushes it under the
    # projection, and each line is parsed once more per field it reads: 60 s against 23 s for
    # 10 M lines)
    rows = parse_lines(lines)
    bad = Observation()  # a fresh random name: never matches an earlier cached read's plan
    rows = rows.observe(bad, *[F.count(F.when(F.col("_bad") == r, 1)).alias(r)
                               for r in BAD_REASONS])
    return rows.where(F.col("_bad").isNull()).drop("_bad"), bad


def bad_line_counts(bad: Observation) -> dict[str, int]:
    """The observed bad lines, reasons that occurred only (blocks until an action has run)."""
    return {r: int(n) for r, n in bad.get.items() if n}


def with_metadata(df: DataFrame) -> DataFrame:
    """Stamp every column with the schema version (kept in the Parquet footer)."""
    return df.select([F.col(c).alias(c, metadata={"notify.schema_version": SCHEMA_VERSION})
                      for c in df.columns])


def conform(df: DataFrame) -> DataFrame:
    """A stored table (Parquet) -> exactly `EVENT_SCHEMA`: missing columns as nulls, in order."""
    have = set(df.columns)
    return df.select([F.col(c).cast(t) if c in have else F.lit(None).cast(t).alias(c)
                      for c, t in COLUMNS.items()])
