"""notify-chaos: fault injection against real notify processes, with a verdict from the
delivery logs (DESIGN §10, seed 004). `notify-chaos run SCENARIO.yaml --out DIR`."""

from notify_chaos.proxy import LinkProxy
from notify_chaos.scenario import Action, Scenario, ScenarioError, load, loads
from notify_chaos.verdict import check, check_run

__all__ = ["Action", "LinkProxy", "Scenario", "ScenarioError", "check", "check_run", "load",
           "loads"]
