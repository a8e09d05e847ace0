"""Typed events the SDK hands to the application, and replies to its requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from client_sdk.presence import arrivals, users


def transitional(members: tuple[str, ...], joined: tuple[str, ...]) -> tuple[str, ...]:
    """The members of a view (proposed or installed) that come from the view before it: all
    but its joiners. The server builds view v+1 as v's members less the leavers, then the
    joiners (notify/core/view.py `View.successor`), so this is v less the leavers, computed
    from what the frame carries."""
    new = set(joined)
    return tuple(m for m in members if m not in new)


@dataclass(slots=True, unsafe_hash=True)
class Message:
    """A message of a group. Not frozen, for speed (a frozen dataclass costs ~5x more to
    build, once per delivery): treat it as read-only."""

    group: str
    offset: int
    stream: str
    seq: int
    sender: str
    view: int
    atomic: bool
    payload: Any
    ts: float


@dataclass(frozen=True, slots=True)
class ViewInstalled:
    """A new view of the group. `members`, `joined` and `left` are instances (member ids,
    `user#instance`); `users`, `users_joined` and `users_left` say the same by user
    (client_sdk/presence.py): a user joins with its first instance and leaves with its last."""

    group: str
    view: int
    members: tuple[str, ...]
    joined: tuple[str, ...]
    left: tuple[str, ...]
    offset: int

    @property
    def transitional(self) -> tuple[str, ...]:
        """The members that moved together from the view before into this one (in view order):
        those of `members` not in `joined`, i.e. the previous view less `left`. They installed
        this view from the previous one, so they delivered exactly the same previous-view
        messages (G2): extended virtual synchrony's transitional configuration
        (docs/semantics.md). A member that left and joined again in the same change (a new
        incarnation, a rejoin without a resume point) is in `joined` and `left`, and is not in
        it; a joiner finds itself outside it."""
        return transitional(self.members, self.joined)

    @property
    def users(self) -> dict[str, tuple[str, ...]]:
        """Each user present, with its instances in the view (in view order)."""
        return users(self.members)

    def _before(self) -> list[str]:
        joined = set(self.joined)
        return [m for m in self.members if m not in joined] + list(self.left)

    @property
    def users_joined(self) -> tuple[str, ...]:
        """Users with no instance in the view before and one in this one (sorted)."""
        return arrivals(self._before(), self.members)[0]

    @property
    def users_left(self) -> tuple[str, ...]:
        """Users with an instance in the view before and none in this one (sorted)."""
        return arrivals(self._before(), self.members)[1]


@dataclass(frozen=True, slots=True)
class InstanceReplaced:
    """Another connection claimed this client's instance (a clash: a copied session, or two
    processes given one `instance`), and the server kept the newer (close 4002). `new` is the
    instance this client took instead and rejoined its groups with (it had picked its instance
    itself), or None: the client is closed, with a `Replaced` failure (the application chose
    the instance, so it decides what runs where)."""

    old: str
    new: str | None


@dataclass(frozen=True, slots=True)
class ViewChanging:
    """View `proposed` is under way: publishes wait until it installs (or `ViewResumed`).
    `members` is the proposed view; it may come again for the same `proposed` when the
    proposal changes (a member failed or came back during the flush)."""

    group: str
    proposed: int
    members: tuple[str, ...]
    joining: tuple[str, ...]
    leaving: tuple[str, ...]
    reason: str

    @property
    def transitional(self) -> tuple[str, ...]:
        """The members expected to move together into the proposed view (in view order): the
        current view less `leaving`, as far as this proposal says; the flush set, which every
        receiver of this event is in. A later `ViewChanging` for the same view may shrink it;
        the `ViewInstalled` says who did move together."""
        return transitional(self.members, self.joining)


@dataclass(frozen=True, slots=True)
class ViewResumed:
    group: str
    view: int


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """The replay of a resume or a rejoin is complete up to `offset`: `count` messages were
    handed over in it, those read from the log (after a `catchup_log`) included."""

    group: str
    offset: int
    count: int


@dataclass(frozen=True, slots=True)
class StateReceived:
    """The group's state for this joiner (G9): `snapshot` is the donor's bytes, verified, or
    None when no member could give it (`reason` says why); the SDK has already passed it to the
    `StateProvider.restore`. Every later event is one the snapshot does not include.

    A state served from the group's stored checkpoint (no member could give it) is followed by
    the messages between the checkpoint and the view boundary, as ordinary `Message` events
    (their `view` is older than the current one): apply them like any other. `streams` is, per
    stream, the last seq the snapshot includes."""

    group: str
    offset: int
    snapshot: bytes | None
    reason: str | None = None
    streams: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CheckpointStored:
    """The server stored a checkpoint this member sent (reply to `Group.checkpoint()`)."""

    req: str
    group: str
    offset: int
    bytes: int


@dataclass(frozen=True, slots=True)
class StateRequested:
    """For the SDK, not the application: a joiner needs this member's state, now."""

    group: str
    transfer: str
    joiner: str
    offset: int


@dataclass(frozen=True, slots=True)
class Removed:
    """This member is no longer in the group (it left, or the group removed it): the group
    handle is done, and the SDK does not join again by itself (the application may). `reason`
    is None when it left (`leave()`); for an install that removed it without its asking, why
    (`removed`: the application's backend removed it through the server API; `flush_timeout`,
    `ack_timeout`...); otherwise the `error` code that refused to let it back in after a
    reconnect (e.g. `forbidden`)."""

    group: str
    view: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Reset:
    """The server could not continue this member's stream of the group, and the SDK joined it
    afresh: what the application derived from earlier events must be rebuilt. It comes right
    before the `ViewInstalled` of the new membership (then `StateReceived`, with a
    `StateProvider`); no later event continues the old stream.

    `reason` is the server's refusal of the resume point: `offset_unavailable` (the log was
    reset, with another epoch, or retention dropped what this member lacked), `bad_resume` (a
    resume point past the log head) or any other refusal code. This member's knowledge of log
    `old_epoch` ended at `old_offset` (the highest offset it received; messages still held back
    then, unconfirmed atomic ones, are dropped); the new knowledge starts after `new_offset` of
    log `new_epoch` (equal epochs: the same log, with a gap in between). `lost`: how many
    messages the log's retention dropped after `old_offset` (when the server said so)."""

    group: str
    reason: str
    old_epoch: int
    old_offset: int
    new_epoch: int
    new_offset: int
    lost: int | None = None


GroupEvent = (Message | ViewInstalled | ViewChanging | ViewResumed | CaughtUp | Removed
              | StateReceived | StateRequested | Reset)


# -- replies to requests (matched by `req` or publish `id`) ------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    req: str
    id: str
    offset: int


@dataclass(frozen=True, slots=True)
class Rejected:
    req: str
    id: str
    code: str


@dataclass(frozen=True, slots=True)
class Outcome:
    id: str
    group: str
    offset: int
    committed: bool
    reason: str | None


@dataclass(frozen=True, slots=True)
class Refreshed:
    """The server has the token of a `refresh` in force (`expires`: its `exp`, or None)."""

    expires: float | None


@dataclass(frozen=True, slots=True)
class ServerError:
    code: str
    message: str
    req: str | None
    #: `offset_unavailable` for a point older than retention: how many messages it dropped
    lost: int | None = None


Reply = Published | Rejected | Outcome | ServerError | CheckpointStored | Refreshed
