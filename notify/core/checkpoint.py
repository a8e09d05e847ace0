"""A group's stored checkpoint: the state one member had after a known set of messages.

Why it exists (DESIGN §5, G9): state transfer needs a donor, and an empty group has none; a donor
that fails mid-transfer may leave nobody to replace it. A member therefore publishes a checkpoint
from time to time. The server keeps the latest one (the bytes live in storage; the core keeps
only this record) and serves a joiner from it: the snapshot, then the messages the log holds
between the checkpoint's position and the view boundary. The joiner ends up exactly where a donor
at the boundary would have put it.

`position` uses the resume-point rule: the snapshot includes every message at or below
`position.offset`, and beyond it every message with `seq <= position.streams[stream]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from notify.core.events import Req, ResumePoint
from notify.core.view import MemberId


@dataclass(frozen=True, slots=True)
class Checkpoint:
    id: str
    member: MemberId
    position: ResumePoint
    #: the member received messages from non-members too (`accept_from: any`): so must the
    #: replay that completes it
    accept_any: bool
    #: base64 bytes on the wire, as stored (what `Limits.max_state_bytes` bounds)
    bytes: int
    chunks: int
    sha256: str
    ts: float


@dataclass(slots=True)
class Upload:
    """A checkpoint on its way in from one member, chunk by chunk."""

    id: str
    req: Req
    next_index: int = 0
    bytes: int = 0
