"""The Work Contract form (apps/dashboard/contract_form.py, its template): every member of
`mwp.work-contract/1` has an input, a contract survives the trip through the rendered form
and back unchanged, local errors name their input, and the server's INVALID_CONTRACT
refusals land beside the input their path names. No database: the template is rendered
with the test settings only."""

import copy
import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.http import QueryDict
from django.template.loader import render_to_string

from apps.dashboard.contract_form import ContractForm
from mission_weave.core import schemas
from mission_weave.protocol.errors import ProtocolError

CHOICES = [("wi_a", "wi_a: research"), ("wi_b", "wi_b: outline"), ("wi_c", "wi_c: figures")]
DEADLINE = "2026-12-08T12:00:00Z"
SCHEMA = json.loads((Path(schemas.__file__).parent / "contract_schemas" / "work-contract-1.json")
                    .read_text())

# A contract with every member of the schema set, optional ones included.
FULL = {
    "schema": "mwp.work-contract/1",
    "revision": 3,
    "goal": "Summarize the quarterly report\nfor the board",
    "deliverables": [
        {"id": "summary", "description": "A one-page summary", "mediaType": "text/markdown"},
        {"id": "figures", "description": "The key figures", "mediaType": "application/json",
         "schema": {"type": "object", "required": ["revenue"],
                    "properties": {"revenue": {"type": "number"}}}}],
    "acceptanceCriteria": [
        {"id": "ac1", "description": "Covers every section",
         "requiredEvidence": "a reviewer's note per section", "method": "human review"},
        {"id": "ac2", "description": "The figures are JSON", "method": "check:json"}],
    "inputs": [{"ref": "sha256:" + "a" * 64, "description": "the report",
                "mediaType": "application/pdf"},
               {"ref": "https://example.com/q3.csv"}],
    "dependencies": {"workItems": ["wi_a", "wi_c"], "policy": "any_verified"},
    "allowed": {"tools": ["search", "calculator"], "data": ["finance-q3"],
                "operations": ["read", "write-draft"], "resources": {"gpu": 1, "disk": "2GB"}},
    "capabilities": [{"id": "summarize", "version": "1"}, {"id": "charts", "version": "2.1"}],
    "deadline": "2030-01-01T00:00:00Z",
    "urgency": "high",
    "businessImpact": "critical",
    "budgets": {"financial": {"amount": "10.50", "currency": "EUR"}, "tokens": 100000,
                "toolCalls": 50, "computeSeconds": 600, "wallClockSeconds": 3600,
                "sideEffects": 0},
    "retry": {"maxAttempts": 4,
              "backoff": {"strategy": "fixed", "initialSeconds": 10, "maxSeconds": 300,
                          "multiplier": 1.5},
              "deadline": "2030-01-02T00:00:00Z",
              "maxCost": {"amount": "2", "currency": "EUR"}},
    "risk": {"class": "medium", "requiresExecutionApproval": True},
    "exclusive": True,
}
SENT = {key: value for key, value in FULL.items() if key != "revision"}


class Page(HTMLParser):
    """The rendered form read as a browser reads it: the controls outside any <template>
    (what a submit posts), every control with its label, and the ids on the page."""

    def __init__(self, html: str):
        super().__init__()
        self.controls, self.label_for, self.ids, self.error_ids = [], set(), set(), []
        self._labels, self._templates, self._textarea, self._select = 0, 0, None, None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "label":
            self._labels += 1
            if "for" in attrs:
                self.label_for.add(attrs["for"])
        elif tag == "template":
            self._templates += 1
        elif tag in ("input", "select", "textarea"):
            default = "on" if attrs.get("type") in ("checkbox", "radio") else ""
            control = {"tag": tag, **attrs, "wrapped": self._labels > 0,
                       "posted": self._templates == 0, "value": attrs.get("value", default)}
            self.controls.append(control)
            self._textarea = control if tag == "textarea" else None
            self._select = control if tag == "select" else None
        elif tag == "option" and self._select is not None and "selected" in attrs:
            self._select["value"] = attrs["value"]
        elif tag == "p" and "field-error" in attrs.get("class", ""):
            self.error_ids.append(attrs.get("id"))

    def handle_endtag(self, tag):
        if tag == "label":
            self._labels -= 1
        elif tag == "template":
            self._templates -= 1
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data):
        if self._textarea is not None:
            self._textarea["value"] += data

    def post(self) -> QueryDict:
        """What submitting the form unchanged sends."""
        pairs = []
        for c in self.controls:
            if not c["posted"] or (c.get("type") in ("checkbox", "radio") and
                                   "checked" not in c):
                continue
            value = c["value"]
            if c["tag"] == "textarea":  # a browser drops the newline right after <textarea>
                value = value.removeprefix("\n").replace("\n", "\r\n")
            pairs.append((c["name"], value))
        return QueryDict(urlencode(pairs))


def rendered(form: ContractForm) -> Page:
    return Page(render_to_string("dashboard/_contract_form.html", {"form": form}))


def post_of(data: dict) -> QueryDict:
    return QueryDict(urlencode(data, doseq=True))


def post_data(contract: dict, **changes) -> dict:
    """The form of `contract` as posted, with some inputs changed."""
    return {**ContractForm.from_contract(contract, CHOICES).as_post(), **changes}


def posted(contract: dict, **changes) -> ContractForm:
    return ContractForm.from_post(post_of(post_data(contract, **changes)), CHOICES)


def refusal(contract: dict) -> dict:
    with pytest.raises(ProtocolError) as raised:
        schemas.check_contract(contract)
    return raised.value.as_json()["error"]


def schema_inputs(node: dict, path: list) -> list:
    """The input name of every leaf member the schema allows (rows at index 0)."""
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if node.get("type") == "object" and "properties" in node:
        return [name for member, child in node["properties"].items()
                if path or member not in ("schema", "revision")
                for name in schema_inputs(child, [*path, member])]
    if node.get("type") == "array" and node["items"].get("type") == "object":
        return schema_inputs(node["items"], [*path, "0"])
    return ["-".join(path)]


# --- the mapping --------------------------------------------------------------------------

def test_the_full_contract_is_valid():
    assert schemas.check_contract(copy.deepcopy(FULL)) == FULL


def test_every_member_of_the_schema_has_an_input():
    page = rendered(ContractForm.from_contract(FULL, CHOICES))
    names = {c["name"] for c in page.controls if c["posted"]}

    assert set(schema_inputs(SCHEMA, [])) - names == set()
    assert "dependencies-workItems" in names and "contract_json" in names


def test_a_contract_goes_through_the_rendered_form_and_back_unchanged():
    page = rendered(ContractForm.from_contract(FULL, CHOICES))

    form = ContractForm.from_post(page.post(), CHOICES)

    assert form.errors == {} and form.form_errors == []
    assert form.contract() == SENT
    assert list(form.contract()) == list(SENT)  # in the schema's order


def test_as_post_is_what_the_browser_posts():
    form = ContractForm.from_contract(FULL, CHOICES)

    assert ContractForm.from_post(post_of(form.as_post()), CHOICES).contract() == SENT


def test_a_dependency_the_choices_do_not_offer_is_kept():
    contract = {**FULL, "dependencies": {"workItems": ["wi_gone"]}}
    page = rendered(ContractForm.from_contract(contract, CHOICES))

    sent = ContractForm.from_post(page.post(), CHOICES).contract()

    assert sent["dependencies"] == {"workItems": ["wi_gone"]}


def test_a_new_item_starts_from_the_defaults_and_the_given_deadline():
    form = ContractForm.from_contract(None, CHOICES, default_deadline=DEADLINE)

    assert form.contract() == {
        "schema": "mwp.work-contract/1", "deliverables": [], "acceptanceCriteria": [],
        "dependencies": {"workItems": [], "policy": "all_verified"}, "capabilities": [],
        "deadline": DEADLINE, "urgency": "normal", "businessImpact": "medium", "budgets": {},
        "retry": {"maxAttempts": 3, "backoff": {"strategy": "exponential",
                                                "initialSeconds": 30, "maxSeconds": 600,
                                                "multiplier": 2}},
        "risk": {"class": "low", "requiresExecutionApproval": False}}
    assert json.loads(form.contract_json)["goal"] == ""


def test_blank_inputs_set_nothing_and_optional_empty_members_are_left_out():
    data = post_data(FULL, **{
        "budgets-tokens": "  ", "budgets-financial-amount": "", "budgets-financial-currency": "",
        "allowed-tools": "\n", "allowed-data": "", "allowed-operations": "",
        "allowed-resources": "", "retry-backoff-multiplier": "", "inputs-0-ref": "",
        "inputs-0-description": "", "inputs-0-mediaType": "", "inputs-1-ref": ""})
    del data["exclusive"]  # a checkbox left clear is not posted

    sent = ContractForm.from_post(post_of(data), CHOICES).contract()

    assert "tokens" not in sent["budgets"] and "financial" not in sent["budgets"]
    assert "allowed" not in sent and "inputs" not in sent and "exclusive" not in sent
    assert "multiplier" not in sent["retry"]["backoff"]
    assert sent["risk"]["requiresExecutionApproval"] is True


def test_blank_rows_are_dropped_and_the_rest_numbered_from_zero():
    data = {k: v for k, v in post_data(FULL).items() if not k.startswith("capabilities-")}
    data.update({"capabilities-0-id": " ", "capabilities-0-version": "",
                 "capabilities-3-id": "charts", "capabilities-3-version": "2",
                 "capabilities-7-id": "", "capabilities-7-version": ""})

    form = ContractForm.from_post(post_of(data), CHOICES)

    assert form.contract()["capabilities"] == [{"id": "charts", "version": "2"}]
    assert form.values["capabilities-0-id"] == "charts"
    assert form.row_counts["capabilities"] == 1


def test_an_input_whose_row_number_is_too_long_to_read_is_no_row():
    form = posted(FULL, **{f"capabilities-{'9' * 5000}-id": "charts"})

    assert form.contract()["capabilities"] == SENT["capabilities"]


def test_a_row_with_a_blank_required_field_is_sent_without_it():
    form = posted(FULL, **{"deliverables-2-description": "Notes"})

    assert form.contract()["deliverables"][2] == {"description": "Notes"}


def test_textarea_line_breaks_arrive_as_plain_newlines():
    form = posted(FULL, goal="First line\r\nsecond line")

    assert form.contract()["goal"] == "First line\nsecond line"


@pytest.mark.parametrize(("name", "typed"), [
    ("budgets-tokens", "lots"), ("budgets-sideEffects", "1.5"), ("retry-maxAttempts", "3x"),
    ("retry-backoff-initialSeconds", "1e3")])
def test_a_count_that_is_not_a_whole_number_is_an_error_on_its_input(name, typed):
    form = posted(FULL, **{name: typed})

    assert form.contract() is None
    assert form.errors == {name: ["Enter a whole number, like 1000."]}
    assert form.values[name] == typed  # kept, to be corrected


def test_a_multiplier_is_any_number():
    assert posted(FULL, **{"retry-backoff-multiplier": "2"}).contract()[
        "retry"]["backoff"]["multiplier"] == 2
    assert posted(FULL, **{"retry-backoff-multiplier": "two"}).errors == {
        "retry-backoff-multiplier": ["Enter a number, like 2 or 1.5."]}


@pytest.mark.parametrize("name", ["deliverables-0-schema", "allowed-resources"])
def test_json_that_does_not_parse_is_an_error_on_its_input(name):
    form = posted(FULL, **{name: '{"type": "object",}'})

    assert form.contract() is None
    assert form.errors[name] == ["This is not JSON: Expecting property name enclosed in "
                                 "double quotes (line 1, column 19)."]


def test_an_error_is_shown_beside_its_input_with_what_was_typed():
    form = posted(FULL, **{"budgets-tokens": "lots"})
    html = render_to_string("dashboard/_contract_form.html", {"form": form})
    page = Page(html)
    tokens = next(c for c in page.controls if c["name"] == "budgets-tokens")

    assert tokens["value"] == "lots" and tokens["aria-invalid"] == "true"
    assert "contract-budgets-tokens-error" in tokens["aria-describedby"].split()
    assert page.error_ids == ["contract-budgets-tokens-error"]
    assert "Enter a whole number, like 1000." in html


# --- the JSON view --------------------------------------------------------------------------

def test_the_json_view_holds_the_contract_without_its_revision():
    form = ContractForm.from_contract(FULL, CHOICES)

    assert json.loads(form.contract_json) == SENT
    assert not form.json_open


def test_with_the_json_editor_the_json_is_the_contract_and_the_form_follows():
    typed = json.dumps({**SENT, "goal": "From JSON", "revision": 4})

    form = posted(FULL, editor="json", contract_json=typed, goal="ignored")

    assert form.contract() == {**SENT, "goal": "From JSON", "revision": 4}
    assert form.editor == "json" and form.contract_json == typed
    assert form.values["goal"] == "From JSON"


def test_with_the_form_editor_the_json_view_follows_the_form():
    form = posted(FULL, goal="Edited", contract_json="stale")

    assert json.loads(form.contract_json)["goal"] == "Edited"


@pytest.mark.parametrize(("typed", "message"), [
    ("{goal: 1}", "This is not JSON: Expecting property name enclosed in double quotes "
                  "(line 1, column 2)."),
    ("[1, 2]", "The contract must be a JSON object: {…}.")])
def test_json_that_is_no_contract_is_an_error_on_the_json_and_opens_it(typed, message):
    form = posted(FULL, editor="json", contract_json=typed)
    page = Page(render_to_string("dashboard/_contract_form.html", {"form": form}))

    assert form.contract() is None
    assert form.errors == {"contract_json": [message]}
    assert form.json_open and "contract-json" in page.ids
    assert form.values["goal"] == FULL["goal"]  # the form is kept as it was


def test_a_refusal_of_json_is_shown_on_the_json():
    form = posted(FULL, editor="json", contract_json=json.dumps({**SENT, "goal": ""}))

    form.add_server_error(refusal(form.contract()))

    assert form.errors == {"contract_json": [
        "Work Contract: body.contract.goal: '' should be non-empty"]}


# --- the server's refusals beside their inputs -----------------------------------------------

@pytest.mark.parametrize(("changes", "target", "message"), [
    ({"goal": ""}, "goal", "'goal' is required"),
    ({"deliverables-1-schema": '{"type": "nope"}'}, "deliverables-1-schema",
     "not a valid JSON Schema: 'nope' is not valid under any of the given schemas"),
    ({"deliverables-1-id": "summary"}, "deliverables-1-id", "id 'summary' is repeated"),
    ({"acceptanceCriteria-0-id": "ac2"}, "acceptanceCriteria-1-id", "id 'ac2' is repeated"),
    ({"retry-backoff-maxSeconds": "5"}, "retry-backoff-maxSeconds",
     "Work Contract: body.contract.retry.backoff.maxSeconds is below initialSeconds"),
    ({"budgets-tokens": "-1"}, "budgets-tokens", "-1 is less than the minimum of 0"),
    ({"budgets-financial-currency": ""}, "budgets-financial-currency",
     "'currency' is required"),
    ({"retry-maxAttempts": ""}, "retry-maxAttempts", "'maxAttempts' is required"),
    ({"deadline": "next week"}, "deadline", "'next week' is not a 'date-time'"),
    ({"acceptanceCriteria-1-method": "check:nope"}, "acceptanceCriteria-1-method",
     "unknown check 'nope'; known checks: json, json-schema, max-size, media-type, "
     "non-empty, sources-present"),
    ({"capabilities-1-version": ""}, "capabilities-1-version", "'version' is required"),
    ({"deliverables-0-id": "", "deliverables-0-description": "", "deliverables-0-mediaType": "",
      "deliverables-1-id": "", "deliverables-1-description": "", "deliverables-1-mediaType": "",
      "deliverables-1-schema": ""}, "deliverables", "[] should be non-empty"),
])
def test_a_refusal_by_check_contract_lands_beside_the_input_its_path_names(changes, target,
                                                                           message):
    form = posted(FULL, **changes)
    sent = form.contract()

    form.add_server_error(refusal(sent))

    assert form.errors == {target: [message]} and form.form_errors == []


def test_a_refusal_inside_a_row_without_its_own_input_goes_to_the_row():
    form = posted(FULL)

    form.add_server_error({"code": "INVALID_CONTRACT", "details": {
        "path": "body.contract.deliverables[1]"},
        "message": "Work Contract: body.contract.deliverables[1]: unknown member(s) "
                   "('size' was unexpected)"})
    page = rendered(form)

    assert form.errors == {"deliverables-1": ["unknown member(s) ('size' was unexpected)"]}
    assert "contract-deliverables-1-error" in page.error_ids


@pytest.mark.parametrize(("error", "target"), [
    ({"code": "INVALID_CONTRACT", "message": "Work Contract: body.contract.dependencies"
      ".workItems[1]: no WorkItem wi_c in Mission msn_1",
      "details": {"path": "body.contract.dependencies.workItems[1]"}},
     "dependencies-workItems"),
    ({"code": "DEPENDENCY_CYCLE", "message": "the dependency would close a cycle: "
      "wi_1 -> wi_a -> wi_1", "details": {"cycle": ["wi_1", "wi_a", "wi_1"]}},
     "dependencies-workItems"),
    ({"code": "INVALID_CONTRACT", "message": "Work Contract: body.contract.deliverables[7]"
      ".id: 'x y' does not match", "details": {"path": "body.contract.deliverables[7].id"}},
     "deliverables"),
    ({"code": "INVALID_CONTRACT", "message": "Work Contract: body.contract.budgets: "
      "unknown member(s)", "details": {"path": "body.contract.budgets"}}, "budgets"),
    ({"code": "INVALID_CONTRACT", "message": "Work Contract: body.contract.retry.backoff: "
      "unknown member(s)", "details": {"path": "body.contract.retry.backoff"}},
     "retry-backoff"),
])
def test_a_path_with_no_input_of_its_own_goes_to_the_nearest_enclosing_one(error, target):
    form = posted(FULL)

    form.add_server_error(error)

    assert list(form.errors) == [target] and form.form_errors == []


@pytest.mark.parametrize("error", [
    {"code": "INVALID_CONTRACT", "message": "Work Contract: body.contract.revision must be 4",
     "details": {"path": "body.contract.revision", "expected": 4}},
    {"code": "VALIDATION_ERROR", "message": "work.authorize body: body.missionId: 'm x' "
     "does not match", "details": {"path": "body.missionId"}},
    {"code": "FORBIDDEN", "message": "only the Coordinator may", "details": {}},
    {"code": "INVALID_CONTRACT", "message": "Work Contract: body.contract: unknown member(s)",
     "details": {"path": "body.contract"}},
])
def test_a_refusal_that_names_no_input_is_an_error_of_the_whole_form(error):
    form = posted(FULL)

    form.add_server_error(error)
    html = render_to_string("dashboard/_contract_form.html", {"form": form})

    assert form.errors == {} and form.form_errors == [error["message"]]
    assert error["message"].replace("'", "&#x27;") in html


# --- the template -----------------------------------------------------------------------------

def test_every_control_has_a_label_and_every_description_exists():
    form = posted(FULL, **{"budgets-tokens": "lots"})
    form.add_server_error(refusal({**SENT, "goal": ""}))
    page = rendered(form)

    unlabelled = [c["name"] for c in page.controls
                  if not c["wrapped"] and c.get("id") not in page.label_for]
    described = {i for c in page.controls for i in c.get("aria-describedby", "").split()}

    assert unlabelled == []
    assert described - page.ids == set()


def test_the_fieldsets_are_the_contracts_parts():
    html = render_to_string("dashboard/_contract_form.html",
                            {"form": ContractForm.from_contract(FULL, CHOICES)})

    legends = [part.split("</legend>")[0] for part in html.split("<legend>")[1:]]
    assert [legend for legend in legends if not legend[-1].isdigit()
            and "__number__" not in legend] == [
        "Goal", "Deliverables", "Acceptance criteria", "Inputs", "Dependencies",
        "Depends on", "Allowed", "Capabilities", "Schedule &amp; priority", "Budgets",
        "Financial", "Retry", "Backoff", "Maximum cost (optional)", "Risk", "Send"]


def test_each_repeated_member_has_its_rows_a_blank_one_and_a_template_to_copy():
    page = rendered(ContractForm.from_contract(FULL, CHOICES))
    ids = [c["name"] for c in page.controls if c["name"].endswith("-id")
           and c["name"].startswith("deliverables-")]
    posted_ids = [c["value"] for c in page.controls if c["name"].startswith("deliverables-")
                  and c["name"].endswith("-id") and c["posted"]]

    assert ids == ["deliverables-0-id", "deliverables-1-id", "deliverables-2-id",
                   "deliverables-__index__-id"]
    assert posted_ids == ["summary", "figures", ""]
    html = render_to_string("dashboard/_contract_form.html",
                            {"form": ContractForm.from_contract(FULL, CHOICES)})
    assert html.count("<button type=\"button\" data-add-row hidden>") == 4
    assert '<template data-row-template data-next-index="3">' in html


@pytest.mark.parametrize(("name", "typed"), [
    ("budgets-tokens", "9" * 17), ("retry-maxAttempts", "-" + "9" * 5000),
    ("retry-backoff-multiplier", "9" * 5000 + ".5")])
def test_a_number_longer_than_a_command_can_carry_is_an_error_on_its_input(name, typed):
    form = posted(FULL, **{name: typed})

    assert form.contract() is None
    assert form.errors == {name: ["Enter a number of at most 16 digits."]}


@pytest.mark.parametrize(("typed", "words"), [
    ("[" + "9" * 5000 + "]", "This JSON holds a number too long to read."),
    ("[" * 100_000 + "]" * 100_000, "This JSON is nested too deeply to read.")])
def test_json_that_python_cannot_read_is_an_error_on_its_input(typed, words):
    form = posted(FULL, **{"allowed-resources": typed})
    whole = ContractForm.from_post(post_of({**post_data(FULL), "editor": "json",
                                            "contract_json": typed}), CHOICES)

    assert form.contract() is None and form.errors == {"allowed-resources": [words]}
    assert whole.contract() is None and list(whole.errors.values()) == [[words]]
