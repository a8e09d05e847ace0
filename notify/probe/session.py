"""One target's pair of SDK connections: a sender and a receiver, both members of the probe
group, as an application's two devices would be.

Why two connections and not one: a member delivers its own messages (G4), so one connection
would see its messages without them ever leaving the server's fan-out for another socket; the
receiver is a second member, so what it measures is what any other member would get.

The clients are ordinary `client_sdk.connect()` clients, reconnecting and resuming by
themselves: the prober is a black box that sees what an application sees (seed 002's probers
"publish and receive like a client"). The one thing no application does is `drop_receiver()`:
it aborts the receiver's TCP connection with no close handshake, as a mobile network does, to
exercise the resume path (G7) on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from client_sdk import (
    Backoff,
    Client,
    ClientOptions,
    ConnectionState,
    Group,
    GroupEvent,
    NotifyError,
    Removed,
    connect,
)

__all__ = ["Session"]

log = logging.getLogger("notify.probe")


def _discard(_: GroupEvent) -> None:
    """The sender's (and a churn member's) own copies: taken at once, so the SDK's bounded
    event queue never fills and never pauses their reading."""


class Session:
    """A connected sender and receiver in the probe group. `lost` is set once either client
    is CLOSED for good or is removed from the group: the owner opens a new session then."""

    def __init__(self, sender: Client, receiver: Client, send_group: Group,
                 recv_group: Group) -> None:
        self.sender, self.receiver = sender, receiver
        self.send_group, self.recv_group = send_group, recv_group
        self.lost = asyncio.Event()
        for c in (sender, receiver):
            c.on_state_change(self._state_changed)

    @classmethod
    async def open(cls, url: str, group: str, on_event: Callable[[GroupEvent], None], *,
                   options: ClientOptions, token: str | None, timeout: float) -> Session:
        """Connect both clients and join `group` with each, within `timeout` seconds in all
        (TimeoutError, or the SDK's `NotifyError`); nothing is left open on a failure.
        `on_event` gets every event of the receiver's group, in order, on its reader."""
        clients: list[Client] = []
        try:
            async with asyncio.timeout(timeout):
                sender = await connect(url, member="probe-send", token=token, options=options)
                clients.append(sender)
                receiver = await connect(url, member="probe-recv", token=token, options=options)
                clients.append(receiver)
                recv_group = await receiver.join(group)
                recv_group.on_event(on_event)
                send_group = await sender.join(group)
                send_group.on_event(_discard)
        except BaseException:
            for c in clients:
                await close_client(c, timeout)
            raise
        session = cls(sender, receiver, send_group, recv_group)
        send_group.on_event(session.watch)
        return session

    def _state_changed(self, _old: ConnectionState, new: ConnectionState) -> None:
        if new is ConnectionState.CLOSED:
            self.lost.set()

    def watch(self, e: GroupEvent) -> None:
        """Each event of either client's group (the sender's as its handler, the receiver's
        from the owner's): a refusal to let it back in ends the session."""
        if isinstance(e, Removed) and e.reason is not None:
            self.lost.set()

    @property
    def connected(self) -> bool:
        return (self.sender.state is ConnectionState.CONNECTED
                and self.receiver.state is ConnectionState.CONNECTED)

    def drop_receiver(self) -> bool:
        """Abort the receiver's socket (no close frame, as a network cut); the SDK reconnects
        and resumes by itself. Returns False when it has no connection to drop right now.

        `Client._ws` is the SDK's private field: the SDK has no public "lose the connection"
        call, since applications never want one (tests reach it the same way)."""
        ws = self.receiver._ws
        if ws is None or self.receiver.state is not ConnectionState.CONNECTED:
            return False
        ws.transport.abort()
        return True

    async def close(self, timeout: float) -> None:
        """Leave the group (so the next prober's join does not wait for the server to suspect
        these members) and close both clients, each step within `timeout` (a stopped server
        cannot hold us)."""
        for g in (self.send_group, self.recv_group):
            with contextlib.suppress(NotifyError, TimeoutError):
                async with asyncio.timeout(timeout):
                    await g.leave()
        for c in (self.sender, self.receiver):
            await close_client(c, timeout)


async def close_client(client: Client, timeout: float) -> None:
    """`client.close()` within `timeout`; past it the SDK has aborted the socket anyway."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await client.close()


def client_options(publish_deadline: float, max_outstanding: int) -> ClientOptions:
    """The probe clients' options: SDK defaults but for the request deadline, which is the
    publish SLI's (a publish unanswered past it is bad, so the SDK need not keep it longer),
    and a short reconnect backoff (the resume SLI measures the server, not our backoff)."""
    return ClientOptions(request_timeout=publish_deadline,
                         backoff=Backoff(base=0.05, cap=1.0),
                         max_pending_publishes=max(1, max_outstanding))
