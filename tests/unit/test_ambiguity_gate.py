"""§10.1's ambiguity gate in the pure core: an essential ambiguity raised in the WorkItem
Conversation blocks every acceptance, the first and a renewed one after a revision, and
only the Coordinator's corrected contract (work.revise_contract) or a replacement
WorkItem resolves it: a prose `resolution` message stays a message. Old logs, whose
resolution messages did clear the ambiguity, still replay as they did."""

import pytest

from mission_weave.core import commands, state
from mission_weave.core.evolve import evolve
from mission_weave.core.state import Event
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import COORDINATOR, T0, WORKER, contract

COORD_ROLES = frozenset({"coordinator"})
WORKER_ROLES = frozenset({"worker"})


def run(view, command):
    drafts = commands.decide(view, command, builders.context())
    return drafts, builders.apply(view, drafts)


def rejected(view, command) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, command, builders.context())
    return raised.value


def worker(command_type, body, item, salt=""):
    return builders.command(command_type, body, item, actor=f"agent:{WORKER}",
                            roles=WORKER_ROLES, command_id=f"cmd-{command_type}-w{salt}")


def coordinator(command_type, body, item, salt=""):
    return builders.command(command_type, body, item, actor=COORDINATOR, roles=COORD_ROLES,
                            command_id=f"cmd-{command_type}{salt}")


def ambiguity(item, message_id="q1"):
    return worker("conversation.post", {"messageId": message_id, "kind": "ambiguity",
                                        "text": "Which quarter is meant?"}, item, message_id)


def revise(item, goal="Summarize Q3"):
    return coordinator("work.revise_contract", {"contract": contract(goal=goal)}, item, goal)


def test_a_renewed_acceptance_is_refused_while_an_ambiguity_is_open():
    # The owner accepted revision 1; the Coordinator revised the contract; the owner then
    # raised an ambiguity about revision 2 before accepting it.
    item = builders.work_item(state.QUEUED)
    view = builders.view_of(item)
    _, view = run(view, revise(item))
    _, view = run(view, ambiguity(view.items[item.id]))
    renew = worker("work.accept_offer", {"contractRevision": 2}, view.items[item.id])

    error = rejected(view, renew)

    assert error.code == "TRANSITION_NOT_PERMITTED"
    assert error.details == {"openAmbiguities": ["q1"]}
    assert view.items[item.id].accepted_revision == 1


def test_a_renewed_acceptance_passes_once_a_revision_clears_the_ambiguity():
    item = builders.work_item(state.QUEUED)
    view = builders.view_of(item)
    _, view = run(view, revise(item))
    _, view = run(view, ambiguity(view.items[item.id]))
    revised, view = run(view, revise(view.items[item.id], goal="Summarize Q3 2026"))

    drafts, after = run(view, worker("work.accept_offer", {"contractRevision": 3},
                                     view.items[item.id]))

    assert revised[0].data["resolvedAmbiguities"] == ["q1"]
    assert [d.type for d in drafts] == ["work.contract_accepted"]
    assert after.items[item.id].accepted_revision == 3


def test_a_resolution_message_does_not_clear_the_ambiguity():
    item = builders.work_item(state.OFFERED)
    view = builders.view_of(item)
    _, view = run(view, ambiguity(item))

    drafts, view = run(view, coordinator("conversation.post", {
        "kind": "resolution", "resolves": "q1", "text": "Q3"}, view.items[item.id]))
    error = rejected(view, worker("work.accept_offer", {"contractRevision": 1},
                                  view.items[item.id]))

    assert [d.type for d in drafts] == ["conversation.message_posted"]
    assert drafts[0].data["cleared"] is False
    assert view.items[item.id].open_ambiguities == ("q1",)
    assert error.code == "TRANSITION_NOT_PERMITTED"
    assert error.details == {"openAmbiguities": ["q1"]}


def test_a_first_acceptance_passes_after_the_revision_that_resolves_it():
    item = builders.work_item(state.OFFERED)
    view = builders.view_of(item)
    _, view = run(view, ambiguity(item))
    _, view = run(view, revise(view.items[item.id]))

    drafts, after = run(view, worker("work.accept_offer", {"contractRevision": 2},
                                     view.items[item.id]))

    assert [d.type for d in drafts] == ["work.offer_accepted"]
    assert after.items[item.id].state == state.QUEUED


def test_an_old_resolution_event_still_clears_its_ambiguity_on_replay():
    # Logs written before the gate hold resolution messages without `cleared`: replay
    # gives what the live tables hold from then, the ambiguity cleared.
    item = builders.work_item(state.OFFERED, open_ambiguities=("q1", "q2"))
    view = builders.view_of(item)
    old = {"messageId": "r1", "kind": "resolution", "text": "Q3", "author": COORDINATOR,
           "resolves": "q1"}

    evolve(view, Event("conversation.message_posted", old, T0, item.mission_id, item.id))
    assert view.items[item.id].open_ambiguities == ("q2",)

    evolve(view, Event("conversation.message_posted", {**old, "messageId": "r2",
                                                      "resolves": "q2", "cleared": False},
                       T0, item.mission_id, item.id))
    assert view.items[item.id].open_ambiguities == ("q2",)


def test_other_messages_carry_no_cleared_member():
    item = builders.work_item(state.OFFERED)
    view = builders.view_of(item)

    drafts, _ = run(view, ambiguity(item))

    assert "cleared" not in drafts[0].data


def test_an_observer_posts_messages_but_raises_no_ambiguity():
    # An ambiguity blocks every acceptance: someone with no part in the work cannot.
    item = builders.work_item(state.OFFERED)
    view = builders.view_of(item)

    def observer(kind):
        return builders.command("conversation.post", {"kind": kind, "text": "Which quarter?"},
                                item, actor="user:watcher", roles=frozenset({"observer"}),
                                command_id=f"cmd-observer-{kind}")

    drafts, after = run(view, observer("message"))
    error = rejected(view, observer("ambiguity"))

    assert [d.type for d in drafts] == ["conversation.message_posted"]
    assert after.items[item.id].open_ambiguities == ()
    assert error.code == "FORBIDDEN"
