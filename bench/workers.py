"""A bench's load processes (bench/idle_conns.py, bench/idle_memory.py): each takes a share of
the work, is told what to do next by a line on its stdin and answers with a JSON line on its
stdout (`say`)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from typing import Any


def say(d: dict[str, Any]) -> None:
    """A load process's answer: one JSON line on stdout."""
    print(json.dumps(d), flush=True)


def shares(total: int, procs: int) -> list[tuple[int, int]]:
    """`total` items cut into at most `procs` consecutive shares: (first, count) of each."""
    if total <= 0:
        return []
    share = -(-total // procs)
    return [(first, min(share, total - first)) for first in range(0, total, share)]


class Workers:
    """The load processes, started from their command lines (`name` says what they are in an
    error)."""

    def __init__(self, cmds: list[list[str]], name: str = "a load process") -> None:
        self.name = name
        self.procs: list[subprocess.Popen[str]] = [
            subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for cmd in cmds]

    def answers(self, key: str) -> list[dict[str, Any]]:
        """The next line of every process, each of which must hold `key`."""
        out = []
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.name} exited ({p.wait()}) before {key!r}")
            d = json.loads(line)
            if key not in d:
                raise RuntimeError(f"{self.name} said {d}, not {key!r}")
            out.append(d)
        return out

    def tell(self, what: str) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(what + "\n")
            p.stdin.flush()

    def close(self) -> None:
        """Tell them to exit; kill one that has not within 30 s."""
        with contextlib.suppress(OSError, ValueError):
            self.tell("exit")
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def rest(self) -> list[dict[str, Any]]:
        """What they said after the last answer read (once they exited: `close`)."""
        out = []
        for p in self.procs:
            if p.stdout is None:
                continue
            with contextlib.suppress(ValueError):
                for line in p.stdout:
                    with contextlib.suppress(ValueError):
                        out.append(json.loads(line))
        return out
