"""A group brought back from storage (G1 across restarts, G5 after a crash, idempotency)."""

from __future__ import annotations

from typing import Any

import orjson
from drive import stored

from notify.core import CoreConfig, Group, Hello, Hub, Join, Order, Publish, ResumePoint
from notify.core.actions import Action, Fanout, Message, Send


def frames(hub: Hub, actions: list[Action]) -> list[dict[str, Any]]:
    return [orjson.loads(orjson.dumps(a.frame)) for a in stored(hub, actions)
            if isinstance(a, Send)]


def restored_hub() -> Hub:
    cfg = CoreConfig()
    recent = [Message("g", o, "fifo:a", o - 10, "a", 5, o in (12, 13), {"n": o}, 1.0, f"id{o}")
              for o in range(11, 15)]
    hub = Hub(cfg, new_token=lambda: "s", epoch=99)
    hub.restore(Group.restored("g", cfg, epoch=7, view=5, head=14, seqs={"fifo:a": 4},
                               recent=recent, outcomes={13: False}))
    return hub


def test_views_go_on_from_the_stored_version_and_the_epoch_is_kept() -> None:
    hub = restored_hub()
    hub.opened(1, 0.0)
    hub.handle(1, Hello(1, "b"), 0.0)
    install = [f for f in frames(hub, hub.handle(1, Join("j", "g"), 0.0))
               if f["type"] == "view_install"]
    assert install == [{"type": "view_install", "group": "g", "view": 6, "members": ["b"],
                        "joined": ["b"], "left": [], "epoch": 7, "offset": 14}]


def test_restored_atomics_resolve_by_the_stored_aborts() -> None:
    """13 was aborted (stored); 12 has no stored outcome: never aborted, so committed."""
    hub = restored_hub()
    hub.opened(1, 0.0)
    hub.handle(1, Hello(1, "b"), 0.0)
    got = frames(hub, hub.handle(1, Join("j", "g", resume=ResumePoint(7, 10)), 0.0))
    kinds = [(f["type"], f.get("offset", f.get("offsets"))) for f in got]
    assert kinds == [("view_install", 14), ("deliver", 11), ("deliver", 12), ("deliver", 13),
                     ("deliver", 14), ("confirm", [12]), ("abort", [13]), ("catchup_done", 14)]


def test_publish_ids_and_stream_positions_survive() -> None:
    hub = restored_hub()
    hub.opened(1, 0.0)
    hub.handle(1, Hello(1, "a"), 0.0)
    stored(hub, hub.handle(1, Join("j", "g"), 0.0))
    retry = hub.handle(1, Publish("r", "g", "id14", 6, Order.FIFO, "again"), 0.0)
    assert frames(hub, retry) == [{"type": "published", "req": "r", "id": "id14", "offset": 14}]
    new = hub.handle(1, Publish("r", "g", "fresh", 6, Order.FIFO, "new"), 0.0)
    (fan,) = [a for a in stored(hub, new) if isinstance(a, Fanout)]
    assert (fan.message.offset, fan.message.stream, fan.message.seq) == (15, "fifo:a", 5)


def hub_with_members() -> Hub:
    """View 5 = (a, b), installed at offset 12 with b joining; messages 11-14 retained."""
    from notify.core.actions import ViewInstall

    cfg = CoreConfig()
    recent = [Message("g", o, "fifo:a", o - 10, "a", 5, False, {"n": o}, 1.0, f"id{o}")
              for o in range(11, 15)]
    install = ViewInstall("g", 5, ("a", "b"), ("b",), (), 7, 12)
    hub = Hub(cfg, new_token=lambda: "s", epoch=99)
    hub.restore(Group.restored("g", cfg, epoch=7, view=5, head=14, seqs={"fifo:a": 4},
                               recent=recent, outcomes={}, install=install, now=0.0))
    return hub


def test_a_member_back_within_the_recovery_window_resumes_and_gets_a_missed_install() -> None:
    """b's last install was 4: the crash came between storing install 5 and sending it."""
    hub = hub_with_members()
    hub.opened(1, 1.0)
    hub.handle(1, Hello(1, "b"), 1.0)
    got = frames(hub, hub.handle(1, Join("j", "g", resume=ResumePoint(7, 10, {"fifo:a": 1}, 4)),
                                 1.0))
    kinds = [(f["type"], f["offset"] if "offset" in f and f["type"] != "view_install" else
              f.get("view")) for f in got]
    assert kinds == [("view_resume", 5), ("deliver", 12), ("view_install", 5), ("deliver", 13),
                     ("deliver", 14), ("catchup_done", 14)]
    assert hub.groups["g"].view.members == ("a", "b")


def test_members_not_back_within_the_recovery_window_are_removed() -> None:
    hub = hub_with_members()
    hub.opened(1, 1.0)
    hub.handle(1, Hello(1, "a"), 1.0)
    stored(hub, hub.handle(1, Join("j", "g", resume=ResumePoint(7, 14, {"fifo:a": 4}, 5)), 1.0))
    assert hub.tick(9.9) == [] and hub.groups["g"].view.version == 5
    change = [f for f in frames(hub, hub.tick(10.1)) if f["type"] == "view_change"]
    assert [(f["proposed"], f["leaving"]) for f in change] == [(6, ["b"])]


def test_the_recovery_window_is_the_hub_s_deadline_even_if_nobody_comes_back() -> None:
    """Restored with members and no connection, the group must still be ticked at the end of
    their window: nothing calls it, so `restore` itself must arm it."""
    hub = hub_with_members()
    deadline = hub.groups["g"].next_deadline()
    assert deadline is not None and hub.next_deadline() == deadline
