"""Safe delivery (docs/semantics.md, "Safe delivery = atomic commit"): what our atomic level does
at a view change, where EVS's safe delivery would deliver in the transitional configuration (an
atomic a leaver never ACKed is aborted: test_guarantees_core.py,
`test_G5_atomic_aborts_at_the_next_install_when_a_member_fails_before_its_ack`).

This test pins a limitation docs/semantics.md describes: an atomic message published during
a flush by a member that has not flushed yet reaches members that have, and if their ACK is not
in when the last `flush_ok` is, the install aborts it (`member_failed`) though no member failed.
All-or-none holds (nobody hands it over); the reason is wrong, and a safe level that never
aborts would have to wait for those ACKs. If the core changes here, this test says so, and the
page must change with it."""

from __future__ import annotations

from drive import G, Net, form, view

from notify.core.events import Ack, FlushOk, Join


def test_an_atomic_sent_in_a_flush_is_aborted_if_a_flushed_member_has_not_acked_it() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    d = net.connect("d")
    net.send(d, Join("jd", G))  # proposes the next view (a join): a and b are asked to flush
    proposed = net.take(a, "view_change")[-1]["proposed"]
    net.send(b, FlushOk(G, proposed))  # b has flushed
    net.publish(a, "at", atomic=True)  # a has not: its atomic is still accepted
    off = net.hub.groups[G].topic.head
    assert [f["offset"] for f in net.take(b, "deliver")] == [off]  # b holds it, its ACK not in
    net.send(a, Ack(G, (off,)))
    net.send(a, FlushOk(G, proposed))  # the last flush_ok: the install resolves what is pending
    got = [(f["type"], f.get("committed"), f.get("reason")) for f in net.take(a)
           if f["type"] in ("abort", "confirm", "outcome", "view_install")]
    assert got == [("abort", None, "member_failed"), ("outcome", False, "member_failed"),
                   ("view_install", None, None)]
    assert view(net)[1] == ("a", "b", "d")  # nobody left
