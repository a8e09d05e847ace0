"""Catch-up past the in-memory window (G8, issue 30): what memory cannot replay, the log serves.

A loaded group keeps only its newest messages in memory (`Limits.window_messages` and
`window_bytes`) and its last installs (`_INSTALL_HISTORY`), while its log keeps everything within
retention (`retain_messages`, applied by the store). A member that resumes or rejoins from a
point memory cannot replay all of is told so with one `catchup_log{after, before}` ahead of the
replay: the messages after `after` and before `before`, and the installs among them, it reads
from the log with `history` requests, a page at a time and at its own pace. Everything else
goes as usual: the replay from `before` on, then live frames. So a catch-up of gigabytes holds
up no other group and no other member (G11), the member takes part in view changes and atomic
ACKs meanwhile (its SDK keeps what comes behind the gap for its application until the gap is
read), and the server keeps no state per catch-up: a page is one bounded read, off the event
loop, answered to one request.

Only a point older than what the log retains is refused (`offset_unavailable`), with how many
messages retention dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from notify.core.actions import ViewInstall
from notify.core.events import ResumePoint
from notify.core.topic import Topic


def log_gap(topic: Topic, installs: Sequence[ViewInstall], rp: ResumePoint, *, view: int,
            external: bool) -> int | None:
    """`before` for a member coming back from `rp` in a group at `view`: from that offset on,
    memory holds every message and install the member lacks; below it, down to `rp.offset`,
    only the log does. None: memory holds all of it (no gap).

    `installs` are the ones remembered, oldest first. The views after `rp.view` that are not
    among them lie in the log; the oldest one remembered was installed at its `offset`, so the
    gap reaches up to it (a page holds the installs at offsets in `[after, before)`, so a gap
    of installs alone, at `rp.offset`, is one too)."""
    missing_views = rp.view < view and (not installs or rp.view + 1 < installs[0].view)
    if not missing_views and topic.can_replay(rp.offset, rp.streams, external=external):
        return None
    before = topic.first_retained
    if missing_views:
        before = min(before, installs[0].offset + 1 if installs else topic.head + 1)
    if before > rp.offset + 1 or (missing_views and before > rp.offset):
        return before
    return None


def lost_to_retention(rp: ResumePoint, log_first: int) -> int:
    """How many offsets after `rp` the log no longer has (0: it has every one)."""
    return max(0, log_first - rp.offset - 1)
