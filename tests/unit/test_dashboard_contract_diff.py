"""The field-by-field difference of two contract revisions (apps/dashboard/contract_diff.py
and its template): paths like the server's, entries matched by id (inputs by ref) so that
a reorder is no change, the revision itself ignored."""

import copy

from django.template.loader import render_to_string

from apps.dashboard.contract_diff import diff
from tests.samples import contract


def revised(before: dict, change) -> dict:
    after = copy.deepcopy(before)
    change(after)
    return after


def test_the_same_contract_at_another_revision_has_no_difference():
    assert diff(contract(revision=1), contract(revision=2)) == []


def test_a_changed_member_is_named_by_its_dotted_path():
    after = revised(contract(), lambda c: (c["budgets"].update(tokens=5000),
                                           c.update(goal="Summarize Q3")))

    assert diff(contract(), after) == [
        {"path": "goal", "kind": "changed", "before": "Summarize the quarterly report",
         "after": "Summarize Q3"},
        {"path": "budgets.tokens", "kind": "changed", "before": 100000, "after": 5000}]


def test_an_added_or_removed_member_has_none_on_its_absent_side():
    after = revised(contract(), lambda c: (c["retry"].update(deadline="2030-01-02T00:00:00Z"),
                                           c["budgets"].pop("toolCalls")))

    assert diff(contract(), after) == [
        {"path": "budgets.toolCalls", "kind": "removed", "before": 50, "after": None},
        {"path": "retry.deadline", "kind": "added", "before": None,
         "after": "2030-01-02T00:00:00Z"}]


def test_reordered_entries_are_no_change_and_a_change_is_named_where_the_entry_now_is():
    before = contract()
    reordered = revised(before, lambda c: c["acceptanceCriteria"].reverse())
    changed = revised(reordered, lambda c: c["acceptanceCriteria"][0].update(
        description="At most 400 words"))

    assert diff(before, reordered) == []
    assert diff(before, changed) == [
        {"path": "acceptanceCriteria[0].description", "kind": "changed",
         "before": "Under 500 words", "after": "At most 400 words"}]


def test_entries_are_matched_by_id_and_inputs_by_ref():
    second = {"id": "figures", "description": "The key figures"}
    before = contract()
    after = revised(before, lambda c: (c["deliverables"].insert(0, second),
                                       c["capabilities"].clear(),
                                       c["inputs"][0].update(description="the Q3 report")))

    assert diff(before, after) == [
        {"path": "deliverables[0]", "kind": "added", "before": None, "after": second},
        {"path": "inputs[0].description", "kind": "changed", "before": "the report",
         "after": "the Q3 report"},
        {"path": "capabilities[0]", "kind": "removed",
         "before": {"id": "summarize", "version": "1"}, "after": None}]


def test_a_list_with_repeated_ids_is_compared_whole():
    before = contract()
    after = revised(before, lambda c: c["deliverables"].append(dict(c["deliverables"][0])))

    assert [change["path"] for change in diff(before, after)] == ["deliverables"]


def test_dependencies_and_allowed_names_are_sets():
    before = contract(dependencies={"workItems": ["wi_a", "wi_b"]})
    reordered = revised(before, lambda c: c["dependencies"]["workItems"].reverse())
    more = revised(before, lambda c: c["dependencies"]["workItems"].append("wi_c"))

    assert diff(before, reordered) == []
    assert diff(before, more) == [
        {"path": "dependencies.workItems", "kind": "changed", "before": ["wi_a", "wi_b"],
         "after": ["wi_a", "wi_b", "wi_c"]}]


def test_a_json_schema_is_one_field():
    before = revised(contract(), lambda c: c["deliverables"][0].update(
        schema={"type": "object", "required": ["title"]}))
    after = revised(before, lambda c: c["deliverables"][0]["schema"]["required"].append("date"))

    assert diff(before, after) == [
        {"path": "deliverables[0].schema", "kind": "changed",
         "before": {"type": "object", "required": ["title"]},
         "after": {"type": "object", "required": ["title", "date"]}}]


def test_an_empty_member_and_an_absent_one_are_the_same_but_zero_is_not_absent():
    before = contract(exclusive=False)  # its allowed.data is [] and resources {}
    after = revised(before, lambda c: (c.pop("exclusive"), c["allowed"].pop("data"),
                                       c["allowed"].pop("resources")))
    no_side_effects = revised(before, lambda c: c["budgets"].pop("sideEffects"))

    assert diff(before, after) == []
    assert diff(before, no_side_effects) == [
        {"path": "budgets.sideEffects", "kind": "removed", "before": 0, "after": None}]


def test_the_table_has_a_row_per_field_and_says_when_nothing_differs():
    after = revised(contract(), lambda c: (c.update(goal="Summarize Q3"),
                                           c["retry"].update(deadline="2030-01-02T00:00:00Z")))

    table = render_to_string("dashboard/_contract_diff.html",
                             {"diff": diff(contract(), after), "rev_a": 1, "rev_b": 2})
    same = render_to_string("dashboard/_contract_diff.html",
                            {"diff": [], "rev_a": 2, "rev_b": 3})

    assert "<th scope=\"col\">Revision 1</th><th scope=\"col\">Revision 2</th>" in table
    assert table.count("<tr class=\"diff-") == 2
    assert "<code>goal</code>" in table and "Summarize Q3" in table
    assert '<tr class="diff-added">' in table and "2 fields differ" in table
    assert "No differences between revision 2 and revision 3." in same
