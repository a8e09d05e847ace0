"""The SLO rules (deploy/prometheus/notify-slo-rules.yml, docs/slo.md) are valid Prometheus rules
(`promtool check rules`), and each alert fires on series that burn its budget and stays silent on
series that do not (`promtool test rules` on notify-slo-rules.test.yml).

promtool comes from Debian's `prometheus` package; `./dev test` installs it when missing and
sets NOTIFY_REQUIRE_PROMTOOL=1, so in CI these tests run or fail, never skip. Elsewhere they
skip, saying why, when promtool is not installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("NOTIFY_REQUIRE_PROMTOOL") == "1":
            pytest.fail("promtool is required (NOTIFY_REQUIRE_PROMTOOL=1) and not installed: "
                        "apt-get install prometheus (./dev test does)")
        pytest.skip("promtool is not installed (Debian's prometheus package; ./dev test "
                    "installs it)")
    return path


def run(*args: str) -> str:
    r = subprocess.run([promtool(), *args], cwd=RULES, capture_output=True, text=True,
                       timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    return out


def test_the_slo_rules_are_valid() -> None:
    out = run("check", "rules", "notify-slo-rules.yml")
    assert "SUCCESS" in out, out


def test_each_burn_rate_alert_fires_on_a_burn_and_not_otherwise() -> None:
    out = run("test", "rules", "notify-slo-rules.test.yml")
    assert "SUCCESS" in out, out
