"""The Work Contract v1 schema (§10.1, PROTOCOL §7): valid passes, every violation is
INVALID_CONTRACT naming the path."""

import json
from pathlib import Path

import pytest

from mission_weave.core import schemas
from mission_weave.protocol.errors import ProtocolError
from tests.unit.builders import contract

SCHEMA = json.loads((Path(schemas.__file__).parent / "contract_schemas" / "work-contract-1.json")
                    .read_text())
REQUIRED = SCHEMA["required"]


def rejection(document, path="body.contract") -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        schemas.check_contract(document, path)
    assert raised.value.code == "INVALID_CONTRACT"
    return raised.value


def without(document: dict, member: str) -> dict:
    return {key: value for key, value in document.items() if key != member}


def test_a_valid_contract_passes_and_is_returned():
    document = contract()

    assert schemas.check_contract(document) is document


def test_a_minimal_contract_passes():
    minimal = without(without(without(contract(), "inputs"), "allowed"), "revision")

    assert schemas.check_contract(minimal) == minimal


def test_the_required_members_are_those_of_section_10_1():
    assert REQUIRED == ["schema", "goal", "deliverables", "acceptanceCriteria", "dependencies",
                        "capabilities", "deadline", "urgency", "businessImpact", "budgets",
                        "retry", "risk"]


@pytest.mark.parametrize("member", REQUIRED)
def test_a_missing_required_member_is_refused_naming_it(member):
    error = rejection(without(contract(), member))

    assert error.details == {"path": "body.contract"}
    assert f"'{member}' is required" in error.message


@pytest.mark.parametrize(("path", "parent_of", "member"), [
    ("deliverables[0]", lambda doc: doc["deliverables"][0], "description"),
    ("acceptanceCriteria[1]", lambda doc: doc["acceptanceCriteria"][1], "id"),
    ("retry.backoff", lambda doc: doc["retry"]["backoff"], "maxSeconds"),
    ("risk", lambda doc: doc["risk"], "requiresExecutionApproval"),
    ("budgets.financial", lambda doc: doc["budgets"]["financial"], "currency"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_a_missing_nested_member_names_its_parent_path(path, parent_of, member):
    document = contract()
    del parent_of(document)[member]

    error = rejection(document)

    assert error.details == {"path": f"body.contract.{path}"}
    assert f"'{member}' is required" in error.message


def test_an_unknown_top_level_member_is_refused():
    error = rejection(contract(reasoning="I think this is easy"))

    assert error.details == {"path": "body.contract"}
    assert "unknown member" in error.message
    assert "reasoning" in error.message


def test_a_typo_in_a_nested_member_is_refused():
    document = contract()
    document["risk"]["requiresExecutionAproval"] = True

    error = rejection(document)

    assert error.details == {"path": "body.contract.risk"}
    assert "requiresExecutionAproval" in error.message


@pytest.mark.parametrize(("member", "value", "path"), [
    ("urgency", "urgent", "body.contract.urgency"),
    ("businessImpact", "huge", "body.contract.businessImpact"),
    ("risk", {"class": "extreme", "requiresExecutionApproval": False},
     "body.contract.risk.class"),
    ("schema", "mwp.work-contract/2", "body.contract.schema"),
    ("dependencies", {"workItems": [], "policy": "most_verified"},
     "body.contract.dependencies.policy"),
])
def test_a_bad_enum_is_refused(member, value, path):
    assert rejection(contract(**{member: value})).details == {"path": path}


@pytest.mark.parametrize("amount", ["10", "10.5", "0.000001", "999999999999999.999999"])
def test_good_money_amounts_pass(amount):
    document = contract(budgets={"financial": {"amount": amount, "currency": "EUR"}})

    assert schemas.check_contract(document) is document


@pytest.mark.parametrize("amount", ["-1", "1e3", "10.1234567", "ten", "", "1,000.00", 10,
                                    "1000000000000000"])
def test_a_bad_money_amount_is_refused(amount):
    document = contract(budgets={"financial": {"amount": amount, "currency": "USD"}})

    assert rejection(document).details == {"path": "body.contract.budgets.financial.amount"}


def test_a_bad_currency_is_refused():
    document = contract(budgets={"financial": {"amount": "1.00", "currency": "usd"}})

    assert rejection(document).details == {"path": "body.contract.budgets.financial.currency"}


def test_max_seconds_below_initial_seconds_is_refused():
    document = contract(retry={"maxAttempts": 3, "backoff": {
        "strategy": "fixed", "initialSeconds": 60, "maxSeconds": 30}})

    error = rejection(document)

    assert error.details == {"path": "body.contract.retry.backoff.maxSeconds"}


def test_max_seconds_equal_to_initial_seconds_passes():
    document = contract(retry={"maxAttempts": 3, "backoff": {
        "strategy": "fixed", "initialSeconds": 30, "maxSeconds": 30}})

    assert schemas.check_contract(document) is document


def test_a_duplicate_criterion_id_is_refused():
    document = contract(acceptanceCriteria=[{"id": "ac1", "description": "one"},
                                            {"id": "ac1", "description": "again"}])

    error = rejection(document)

    assert error.details == {"path": "body.contract.acceptanceCriteria"}
    assert "'ac1' is repeated" in error.message


def test_a_duplicate_deliverable_id_is_refused():
    document = contract(deliverables=[{"id": "d", "description": "one"},
                                      {"id": "d", "description": "two"}])

    assert rejection(document).details == {"path": "body.contract.deliverables"}


@pytest.mark.parametrize("deadline", ["tomorrow", "2030-01-01", "2030-01-01T00:00:00",
                                      "01/01/2030 00:00"])
def test_a_deadline_that_is_not_a_date_time_is_refused(deadline):
    assert rejection(contract(deadline=deadline)).details == {"path": "body.contract.deadline"}


@pytest.mark.parametrize("deadline", ["2030-01-01T00:00:00Z", "2030-01-01T02:00:00+02:00",
                                      "2030-01-01T00:00:00.5Z"])
def test_a_date_time_deadline_passes(deadline):
    document = contract(deadline=deadline)

    assert schemas.check_contract(document) is document


def test_the_path_prefix_is_the_callers():
    error = rejection(without(contract(), "goal"), path="proposal.contract")

    assert error.details == {"path": "proposal.contract"}


def test_empty_acceptance_criteria_are_refused():
    # Completion must be provable against criteria (§13.2): at least one is required.
    assert rejection(contract(acceptanceCriteria=[])).details == {
        "path": "body.contract.acceptanceCriteria"}


def test_a_negative_budget_is_refused():
    document = contract(budgets={"tokens": -1})

    assert rejection(document).details == {"path": "body.contract.budgets.tokens"}
