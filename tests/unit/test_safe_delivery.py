"""Safe delivery (docs/semantics.md, "Safe delivery = atomic commit"): what our atomic level does
at a view change, where EVS's safe delivery would deliver in the transitional configuration (an
atomic a leaver never ACKed is aborted: test_guarantees_core.py,
`test_G5_atomic_aborts_at_the_next_install_when_a_member_fails_before_its_ack`).

An atomic message is never aborted by a view change nobody failed in: one published while a
view change is flushing is refused `view_changing` and sent again (same id) after the install.
Before, it reached members that had flushed, and if their ACK was not in when the last
`flush_ok` was, the install aborted it (`member_failed`) though no member failed."""

from __future__ import annotations

from drive import G, Net, form, view

from notify.core.events import Ack, FlushOk, Join


def test_an_atomic_sent_in_a_flush_waits_for_the_install_and_commits() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    d = net.connect("d")
    net.send(d, Join("jd", G))  # proposes the next view (a join): a and b are asked to flush
    proposed = net.take(a, "view_change")[-1]["proposed"]
    net.send(b, FlushOk(G, proposed))  # b has flushed
    net.publish(a, "at", atomic=True)  # a has not: its atomic waits for the install
    assert [(f["type"], f.get("code")) for f in net.take(a, "rejected")] == [
        ("rejected", "view_changing")]
    assert net.take(b, "deliver") == []
    net.send(a, FlushOk(G, proposed))  # the last flush_ok: installed, nothing aborted
    assert [f["type"] for f in net.take(a) if f["type"] in ("abort", "view_install")] == [
        "view_install"]
    assert view(net)[1] == ("a", "b", "d")
    net.take(b), net.take(d)
    net.publish(a, "at", atomic=True)  # sent again, as the SDK does, in the new view
    off = net.hub.groups[G].topic.head
    for x in (a, b, d):
        assert [f["offset"] for f in net.take(x, "deliver")] == [off]
        net.send(x, Ack(G, (off,)))
    assert [(f["type"], f["committed"]) for f in net.take(a, "outcome")] == [("outcome", True)]
