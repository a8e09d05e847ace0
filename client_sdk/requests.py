"""The client's requests, sans I/O: which request waits for which answer, and what a refusal
means. `ClientProtocol` owns one `Requests` (`protocol.requests`); the I/O layer keeps only its
futures, keyed by what the protocol hands back (`Answer.kind`, `Answer.key`).

Theory of operation (DESIGN §3; issue 16):
- A request the application waits for is *opened* through the protocol (`open_join`,
  `open_leave`, `open_publish`, `open_checkpoint`, `open_refresh`). The protocol matches the
  server's replies, and the installs that answer joins and leaves, to them and queues one
  `Answer` per request that is over, with its result or the `NotifyError` it ends with. The
  host drains them with `ClientProtocol.answers()` after every call, as it drains
  `data_to_send()`.
- Publishes wait in `publishes` (by idempotency id) until answered: unsent while the connection
  is down or the group flushes; a reply `rejected{view_changing}` (the publish crossed a view
  change) or a lost connection makes one unsent again, and it is sent again, with the same id,
  as soon as its group can send (never delivered twice). An atomic publish is answered by
  `published`, then by its `outcome`.
- The refusal policy of a join the application holds (a group handle): "not now"
  (`RETRIED_JOIN_REFUSALS`) → the same join again after a backoff delay (`RetryJoin`, a timer
  for the host), at most `JOIN_RETRIES` times; a refused resume point (`offset_unavailable`,
  `bad_resume`, any code) → join afresh (`JoinedAfresh`); a join without a resume point → the
  waiting `join()` fails with `ServerRefused`, or a group already joined is over (`Removed`
  with the code as its reason).
- A join the application gave up on (its deadline passed) is *abandoned*: if the server
  installs it after all, the protocol leaves at once. So is a leave it gave up on: the group is
  not rejoined after a reconnect.
- A leave refused `not_member`/`no_group` (`LEFT_LEAVE_REFUSALS`) is done: the member is out.
  A leave still waiting at a reconnect is sent again instead of its group's rejoin (C6).
- Every table is emptied by what answers it, by `forget_*` (the host's deadline passed) or by
  `close()` (G14: nothing waits forever).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from client_sdk.errors import NotifyError
from client_sdk.events import ServerError

__all__ = [
    "JOIN_RETRIES",
    "LEFT_LEAVE_REFUSALS",
    "REFRESH_REFUSALS",
    "RESENT_PUBLISH_REFUSALS",
    "RETRIED_JOIN_REFUSALS",
    "Answer",
    "JoinedAfresh",
    "PendingPublish",
    "RequestKind",
    "RequestOutput",
    "Requests",
    "RetryJoin",
    "StrayError",
]

#: refusals of a join that say "not now" rather than "no" (`join_pending`: an earlier join of
#: this member is still being withdrawn; `unavailable`: the group cannot be read from its log
#: right now): the same join again, resume point included, after a backoff delay
RETRIED_JOIN_REFUSALS = frozenset({"join_pending", "unavailable"})
#: refusals of a resuming join that end the group rather than join it afresh (`removed`: the
#: server API removed this member, perhaps while it was away)
FINAL_JOIN_REFUSALS = frozenset({"removed"})
#: ... at most this many times in a row (an install, or a reconnect, starts the count again)
JOIN_RETRIES = 10
#: a publish refused with one of these codes is sent again (same id) once its group can send;
#: any other `rejected` code fails it with `PublishRejected`
RESENT_PUBLISH_REFUSALS = frozenset({"view_changing"})
#: `error` codes without `req` that answer a `refresh` (the oldest waiting)
REFRESH_REFUSALS = frozenset({"token_invalid", "token_expired", "token_revoked",
                              "member_mismatch"})
#: refusals of a leave that mean "already out" (removed while away, or the group is gone): the
#: leave is done, and the group is over (`Removed` with the code as its reason)
LEFT_LEAVE_REFUSALS = frozenset({"not_member", "no_group"})


class RequestKind(StrEnum):
    JOIN = "join"  # key: the group
    LEAVE = "leave"  # key: the group
    PUBLISH = "publish"  # key: the publish id
    CHECKPOINT = "checkpoint"  # key: the request's `req`
    REFRESH = "refresh"  # key: what `open_refresh` returned


@dataclass(frozen=True, slots=True)
class Answer:
    """A request is over: `value` is its result (`PublishResult`, `ViewInstalled`,
    `CheckpointStored` or None), unless `error` says why it failed."""

    kind: RequestKind
    key: str
    value: Any = None
    error: NotifyError | None = None


@dataclass(frozen=True, slots=True)
class RetryJoin:
    """For the host: after the backoff delay of `attempt`, call
    `ClientProtocol.retry_join(group, req)` (it sends the join again unless something else
    happened to the group meanwhile)."""

    group: str
    req: str
    attempt: int


@dataclass(frozen=True, slots=True)
class JoinedAfresh:
    """The server refused the resume point of `group` (`code`): the protocol joined it afresh
    (with state transfer if `want_state`); a `Reset` comes before the next install."""

    group: str
    code: str
    message: str
    want_state: bool


@dataclass(frozen=True, slots=True)
class StrayError:
    """An `error` frame that answered no request opened through the protocol."""

    error: ServerError


RequestOutput = Answer | RetryJoin | JoinedAfresh | StrayError


@dataclass(slots=True)
class PendingPublish:
    """A publish waiting to be sent or answered. An atomic publish is answered twice
    (`published`, then `outcome`); `offset` keeps the first answer's."""

    group: str
    frame: dict[str, Any]
    atomic: bool
    sent: bool = False
    offset: int = 0


class Requests:
    """The tables of the requests under way (see the module docstring). `ClientProtocol`
    changes them; a host reads them (e.g. how many publishes wait) but never writes them."""

    def __init__(self) -> None:
        #: publishes by idempotency id, in the order they were opened
        self.publishes: dict[str, PendingPublish] = {}
        #: some publish may not be sent yet (False: none is)
        self.unsent = False
        #: the groups the application holds a handle for: name -> it has a `StateProvider`
        #: (a join afresh then asks for state). The refusal policy applies to these.
        self.held: dict[str, bool] = {}
        #: groups whose `open_join` waits for the first install that has this member
        self.joins: set[str] = set()
        #: leaves waiting for the install without this member: group -> req
        self.leaves: dict[str, str] = {}
        #: checkpoint uploads waiting for `checkpoint_stored`, by req
        self.checkpoints: set[str] = set()
        #: refreshes waiting for `refreshed`, oldest first (the frame has no req)
        self.refreshes: deque[str] = deque()
        #: joins given up on: left as soon as the server installs them
        self.abandoned: set[str] = set()
        #: "not now" refusals in a row, per group
        self.join_retries: dict[str, int] = {}
        #: whether a host opened requests (and so drains `answers()`): only then are errors
        #: that answer nothing queued as `StrayError`
        self.in_use = False
        self.out: list[RequestOutput] = []
        self._reqs = itertools.count(1)

    def new_req(self, prefix: str = "r") -> str:
        """A request id of this client: `prefix` and a number (1, 2, ...) counted over every
        request id it makes."""
        return f"{prefix}{next(self._reqs)}"

    def waiting(self) -> dict[str, int]:
        """How many requests of each kind wait for an answer (for tests and metrics)."""
        return {RequestKind.JOIN: len(self.joins), RequestKind.LEAVE: len(self.leaves),
                RequestKind.PUBLISH: len(self.publishes),
                RequestKind.CHECKPOINT: len(self.checkpoints),
                RequestKind.REFRESH: len(self.refreshes)}

    def fail_publishes(self, group: str, error: NotifyError, *, sent_too: bool = False,
                       same_view_only: bool = False) -> None:
        """Fail the publishes of `group` not sent yet (`sent_too`: all of them)."""
        if not self.publishes:
            return
        for pid, p in list(self.publishes.items()):
            if p.group != group or (p.sent and not sent_too) or (
                    same_view_only and not p.frame["same_view"]):
                continue
            del self.publishes[pid]
            self.out.append(Answer(RequestKind.PUBLISH, pid, error=error))

    def close(self) -> None:
        """Forget every request (the host fails its waiters itself)."""
        self.publishes.clear()
        self.unsent = False
        self.joins.clear()
        self.leaves.clear()
        self.checkpoints.clear()
        self.refreshes.clear()
        self.out.clear()
