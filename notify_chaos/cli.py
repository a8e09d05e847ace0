"""`notify-chaos`: run a fault-injection scenario, list the shipped ones, re-check a run.

    notify-chaos run SCENARIO.yaml --out DIR     # deploy, inject, report; exit 0/1/2
    notify-chaos run sigkill-sqlite --out DIR    # a shipped scenario by name
    notify-chaos list                            # shipped scenarios, one line each
    notify-chaos check DIR                       # the verdict again over DIR/logs
    notify-chaos table DIR...                    # runs' results as a Markdown table

Exit status: 0 the verdict is clean; 1 it found a violation (acknowledged-but-lost, duplicate,
out of order, views that disagree); 2 the run itself failed (bad scenario, a process that did not
start...). Ctrl-C stops every process the run started and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import traceback
from pathlib import Path

from notify_chaos import report as report_mod
from notify_chaos.probe import sli_lines
from notify_chaos.runner import Runner, prepare_out
from notify_chaos.scenario import Scenario, ScenarioError, load
from notify_chaos.verdict import RULES, check_run, view_change_lines

SHIPPED = Path(__file__).parent / "scenarios"


def shipped() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SHIPPED.glob("*.yaml"))}


def resolve(name: str) -> Path:
    p = Path(name)
    if p.exists() or p.suffix in (".yaml", ".yml"):
        return p
    return shipped().get(name, p)


def _list() -> int:
    for name, path in shipped().items():
        try:
            s = load(path)
            print(f"{name:28} {s.duration + s.drain:5.0f}s max  {s.description}")
        except ScenarioError as e:
            print(f"{name:28} (invalid: {e})")
    return 0


async def _run_async(s: Scenario, out: Path, text: str) -> tuple[dict[str, object], str | None]:
    runner = Runner(s, out, text)
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    interrupted = []

    def on_signal(sig: int) -> None:
        interrupted.append(sig)
        if task is not None:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    failure = None
    try:
        summary = await runner.run()
    except asyncio.CancelledError:
        failure = f"interrupted by signal {interrupted[0] if interrupted else '?'}"
        summary = runner.summary()
    except Exception as e:
        failure = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        summary = runner.summary()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return summary, failure


def run(scenario_path: Path, out: Path) -> int:
    try:
        s = load(scenario_path)
    except ScenarioError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        prepare_out(out)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 2
    text = scenario_path.read_text()
    (out / "scenario.yaml").write_text(text)
    if s.name is None:
        s = s.model_copy(update={"name": scenario_path.stem})
    summary, failure = asyncio.run(_run_async(s, out, text))
    (out / "run.json").write_text(json.dumps(summary, indent=2) + "\n")
    if not summary.get("t0"):
        print(f"run failed before t=0: {failure}", file=sys.stderr)
        return 2
    verdict = check_run(out)
    rep = report_mod.build(out, s, verdict, failure)
    _print_summary(rep)
    if failure:
        print(f"run failed: {failure}", file=sys.stderr)
        return 2
    return 0 if verdict["ok"] else 1


def _print_summary(rep: dict[str, object]) -> None:
    print(f"{rep['scenario']}: {rep['description']}")
    head = report_mod.TABLE3_HEAD
    for row in report_mod.table3(rep):
        print("  " + "; ".join(f"{h}: {v}" for h, v in zip(head, row, strict=True)))
    v = rep["verdict"]
    assert isinstance(v, dict)
    print("verdict: " + ("OK" if v["ok"] else "VIOLATIONS") + " — " + ", ".join(
        f"{k} {v[k]['count']}" for k in
        RULES)
        + f", unexplained view changes {v['view_changes']['unexplained']['count']}")
    for k in RULES:
        for ex in v[k]["examples"][:3]:
            print(f"  {k}: {ex}")
    for line in view_change_lines(v["view_changes"]):
        print(line)
    for line in report_mod.takeover_lines(rep):
        print(line)
    for line in sli_lines(rep):
        print(line)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="notify-chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a scenario")
    r.add_argument("scenario", help="a YAML file, or the name of a shipped scenario")
    r.add_argument("--out", required=True, type=Path, help="directory for logs and the report")
    sub.add_parser("list", help="the shipped scenarios")
    c = sub.add_parser("check", help="the verdict again over an earlier run's logs and acks")
    c.add_argument("dir", type=Path)
    t = sub.add_parser("table", help="earlier runs' results as one Markdown table")
    t.add_argument("dirs", type=Path, nargs="+")
    a = p.parse_args(argv)
    if a.cmd == "table":
        print(report_mod.MARKDOWN_HEAD)
        for d in a.dirs:
            for row in report_mod.markdown_rows(json.loads((d / "report.json").read_text())):
                print(row)
        return 0
    if a.cmd == "list":
        return _list()
    if a.cmd == "check":
        v = check_run(a.dir)
        print(json.dumps(v, indent=2))
        return 0 if v["ok"] else 1
    return run(resolve(a.scenario), a.out)


if __name__ == "__main__":
    sys.exit(main())
