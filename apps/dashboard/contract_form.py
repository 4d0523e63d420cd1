"""The Coordinator's Work Contract form (`mwp.work-contract/1`, PROTOCOL §7): an input for
every member of the contract, a raw-JSON view of the same contract for power users, and a
refusal from the server shown beside the input its path names.

A faithful mapping, not a validator: the pipeline checks the contract against its schema.
Here inputs become members and members become inputs; the only local errors are inputs
that cannot become a member at all (a count that is not a whole number, JSON that does not
parse). A blank input sets nothing, so a missing required member is the server's to name.

An input's name is its member's path in the contract joined by "-": `goal`,
`retry-backoff-maxSeconds` (contract["retry"]["backoff"]["maxSeconds"]),
`deliverables-1-schema` (contract["deliverables"][1]["schema"]). Every value is kept as
the text typed, so a form shown again after an error shows what was typed.
"""

import json
import re
from dataclasses import dataclass, field

from mission_weave.core import checks, schemas
from mission_weave.core.json_types import JsonObject
from mission_weave.core.jsonschema_check import violations

SCHEMA_ID = "mwp.work-contract/1"
FORM, JSON = "form", "json"  # the two editors; the chosen one's content is sent
JSON_INPUT = "contract_json"

TEXT, TEXTAREA, SELECT, INTEGER, NUMBER, JSON_TEXT, NAMES, CHECKBOX, CHECKBOXES = (
    "text", "textarea", "select", "integer", "number", "json", "names", "checkbox",
    "checkboxes")
MULTILINE = {TEXTAREA: 3, JSON_TEXT: 4, NAMES: 3}  # kind -> textarea rows
INPUT_MODE = {INTEGER: "numeric", NUMBER: "decimal"}
WHOLE = re.compile(r"-?[0-9]+")
DECIMAL = re.compile(r"-?[0-9]+\.[0-9]+")
MAX_DIGITS = 16  # before the point: 2**53 - 1, the largest integer a command carries, has 16
ROW_INPUT = re.compile(r"([A-Za-z]+)-([0-9]{1,6})-([A-Za-z]+)")  # short enough for int()
CONTRACT_MEMBER = re.compile(r"body\.contract((?:\.[A-Za-z]+|\[[0-9]+\])*)")
MISSING = re.compile(r"'([A-Za-z]+)' is required$")  # jsonschema_check._plain's wording
REPEATED = re.compile(r"id '([^']*)' is repeated")  # check_contract's duplicate-id wording
UNSET = object()  # a blank input: the member is left out

# The top-level members in the schema's order, which is the order the contract is sent in.
ORDER = ("schema", "goal", "deliverables", "acceptanceCriteria", "inputs", "dependencies",
         "allowed", "capabilities", "deadline", "urgency", "businessImpact", "budgets",
         "retry", "risk", "exclusive")


@dataclass(frozen=True)
class Input:
    """One input of the form: its name (the member's path, see above), label and kind."""

    name: str
    label: str
    kind: str = TEXT
    choices: tuple = ()  # (value, label) of a select
    hint: str = ""
    optional: bool = False  # said beside it; an optional checkbox left clear sets nothing


def levels(*names: str) -> tuple:
    return tuple((name, name) for name in names)


def money(prefix: str) -> tuple:
    return (Input(f"{prefix}-amount", "Amount", hint="A decimal, like 10.00."),
            Input(f"{prefix}-currency", "Currency", hint="ISO 4217, like EUR."))


def dimension(name: str, label: str) -> Input:
    return Input(f"budgets-{name}", label, INTEGER)  # optional, as the fieldset says


GOAL = (Input("goal", "What the work is to achieve", TEXTAREA),)
DEPENDENCIES = (
    Input("dependencies-workItems", "Depends on", CHECKBOXES),
    Input("dependencies-policy", "Dependency policy", SELECT, choices=(
        ("", "not set (all_verified)"),
        ("all_verified", "all_verified: every dependency verified"),
        ("any_verified", "any_verified: at least one dependency verified"),
        ("all_terminal", "all_terminal: every dependency verified, failed or cancelled"))),
)
ALLOWED = (
    Input("allowed-tools", "Tools", NAMES, hint="One name per line; the capability token's "
          "tool scopes.", optional=True),
    Input("allowed-data", "Data", NAMES, hint="One name per line.", optional=True),
    Input("allowed-operations", "Operations", NAMES, hint="One name per line; the capability "
          "token's operation scopes.", optional=True),
    Input("allowed-resources", "Resources", JSON_TEXT, hint="A JSON object.", optional=True),
)
SCHEDULE = (
    Input("deadline", "Deadline", hint="UTC, ISO 8601, like 2026-12-08T12:00:00Z."),
    Input("urgency", "Urgency", SELECT, levels("low", "normal", "high", "critical")),
    Input("businessImpact", "Business impact", SELECT,
          levels("low", "medium", "high", "critical")),
    Input("exclusive", "Exclusive", CHECKBOX, optional=True),
)
FINANCIAL = money("budgets-financial")
COUNTS = (dimension("tokens", "Tokens"), dimension("toolCalls", "Tool calls"),
          dimension("computeSeconds", "Compute seconds"),
          dimension("wallClockSeconds", "Wall-clock seconds"),
          dimension("sideEffects", "Side effects"))
ATTEMPTS = (Input("retry-maxAttempts", "Maximum attempts", INTEGER, hint="1 to 100."),)
BACKOFF = (
    Input("retry-backoff-strategy", "Strategy", SELECT, levels("fixed", "exponential")),
    Input("retry-backoff-initialSeconds", "Initial delay (seconds)", INTEGER),
    Input("retry-backoff-maxSeconds", "Longest delay (seconds)", INTEGER,
          hint="At least the initial delay."),
    Input("retry-backoff-multiplier", "Multiplier", NUMBER, hint="At least 1; 2 when blank.",
          optional=True),
)
RETRY_DEADLINE = (Input("retry-deadline", "Retry deadline", hint="UTC, ISO 8601; no retry "
                        "starts after it.", optional=True),)
MAX_COST = money("retry-maxCost")
RISK = (
    Input("risk-class", "Risk class", SELECT, levels("low", "medium", "high", "critical")),
    Input("risk-requiresExecutionApproval", "Requires execution approval by a MissionOwner "
          "before it starts", CHECKBOX),
)
SCALARS = (*GOAL, *DEPENDENCIES, *ALLOWED, *SCHEDULE, *FINANCIAL, *COUNTS, *ATTEMPTS,
           *BACKOFF, *RETRY_DEADLINE, *MAX_COST, *RISK)
TYPED = tuple(spec for spec in SCALARS if spec.kind != CHECKBOXES)  # held as text
CHECKBOX_NAMES = {spec.name for spec in TYPED if spec.kind == CHECKBOX}


@dataclass(frozen=True)
class Rows:
    """A repeated member: one fieldset per entry, named `<member>-<index>-<field>`."""

    member: str
    legend: str
    noun: str  # "Deliverable 2"
    add_label: str
    inputs: tuple
    required: bool  # sent even when empty, for the server to say whether it may be
    hint: str = ""


DELIVERABLES = Rows("deliverables", "Deliverables", "deliverable", "Add a deliverable", (
    Input("id", "ID"), Input("description", "Description", TEXTAREA),
    Input("mediaType", "Media type", hint="Like application/json.", optional=True),
    Input("schema", "JSON Schema", JSON_TEXT, optional=True,
          hint="A JSON Schema (2020-12) its artifacts must validate against.")),
    required=True)
CRITERIA = Rows("acceptanceCriteria", "Acceptance criteria", "criterion", "Add a criterion", (
    Input("id", "ID"), Input("description", "Description", TEXTAREA),
    Input("requiredEvidence", "Required Evidence", optional=True),
    Input("method", "Method", optional=True,
          hint=f"check:<name>[:<argument>] runs a server check "
               f"({', '.join(sorted(checks.REGISTRY))}); anything else tells a reviewer "
               f"how to decide.")),
    required=True)
INPUTS = Rows("inputs", "Inputs", "input", "Add an input", (
    Input("ref", "Reference", hint="An artifact hash or a URI."),
    Input("description", "Description", optional=True),
    Input("mediaType", "Media type", optional=True)), required=False)
CAPABILITIES = Rows("capabilities", "Capabilities", "capability", "Add a capability", (
    Input("id", "ID"), Input("version", "Version")), required=True,
    hint="What an Agent Card must list to be eligible.")
ROWS = (DELIVERABLES, CRITERIA, INPUTS, CAPABILITIES)


def new_contract(deadline: str) -> dict:
    """What a new WorkItem's form starts from."""
    return {"schema": SCHEMA_ID, "goal": "", "deliverables": [], "acceptanceCriteria": [],
            "dependencies": {"workItems": [], "policy": "all_verified"}, "capabilities": [],
            "deadline": deadline, "urgency": "normal", "businessImpact": "medium",
            "budgets": {},
            "retry": {"maxAttempts": 3, "backoff": {"strategy": "exponential",
                                                    "initialSeconds": 30, "maxSeconds": 600,
                                                    "multiplier": 2}},
            "risk": {"class": "low", "requiresExecutionApproval": False}}


# --- what the template draws -------------------------------------------------------------

@dataclass
class Choice:
    value: str
    label: str
    checked: bool


@dataclass
class Field:
    name: str
    label: str
    kind: str
    value: str = ""
    choices: list = field(default_factory=list)
    hint: str = ""
    errors: list = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"contract-{self.name}"

    @property
    def rows(self) -> int | None:
        return MULTILINE.get(self.kind)

    @property
    def input_mode(self) -> str:
        return INPUT_MODE.get(self.kind, "")

    @property
    def described_by(self) -> str:
        return " ".join(([f"{self.id}-hint"] if self.hint else [])
                        + ([f"{self.id}-error"] if self.errors else []))


@dataclass
class Group:
    """Inputs drawn together: a section's own, a nested object's (Backoff) or a row's."""

    key: str  # the error target: a row ("deliverables-0") or nested member ("retry-backoff")
    legend: str
    fields: list
    errors: list = field(default_factory=list)
    template: bool = False  # the row the "Add" button copies, `__index__` in its names
    next_index: int = 0  # of a template: the index the next copy gets

    @property
    def id(self) -> str:
        return f"contract-{self.key}"


@dataclass
class Section:
    """One fieldset of the form."""

    key: str  # the contract member it holds, or a name of its own (purpose, schedule)
    legend: str
    groups: list
    errors: list = field(default_factory=list)
    hint: str = ""
    add_label: str = ""  # the "Add a deliverable" button of a repeated member

    @property
    def id(self) -> str:
        return f"contract-{self.key}-fieldset"


# --- the form ------------------------------------------------------------------------------

@dataclass
class ContractForm:
    values: dict  # input name -> the text typed (a checkbox: "on" or "")
    row_counts: dict  # repeated member -> how many filled rows
    work_items: list  # the dependencies checked
    dependency_choices: list  # (WorkItem id, label) that may be depended on
    editor: str = FORM
    contract_json: str = ""
    errors: dict = field(default_factory=dict)  # input, row or member name -> messages
    form_errors: list = field(default_factory=list)  # errors that name no part of the form
    sent: dict | None = None  # the contract `contract()` read last

    @classmethod
    def from_contract(cls, contract: dict | None, dependency_choices,
                      default_deadline: str = "") -> "ContractForm":
        """The form showing `contract`, or a new WorkItem's defaults when it is None."""
        document = contract if contract is not None else new_contract(default_deadline)
        values = {spec.name: _text(_at(document, spec.name), spec.kind) for spec in TYPED}
        row_counts = {}
        for rows in ROWS:
            entries = [e for e in _list(_at(document, rows.member)) if isinstance(e, dict)]
            row_counts[rows.member] = len(entries)
            for index, entry in enumerate(entries):
                for spec in rows.inputs:
                    values[f"{rows.member}-{index}-{spec.name}"] = _text(entry.get(spec.name),
                                                                         spec.kind)
        work_items = [_text(i, TEXT) for i in _list(_at(document, "dependencies-workItems"))]
        return cls(values, row_counts, work_items, list(dependency_choices),
                   contract_json=_pretty({k: v for k, v in document.items() if k != "revision"}))

    @classmethod
    def from_post(cls, post, dependency_choices) -> "ContractForm":
        """The form as posted (a QueryDict or any mapping with .get, .getlist and .keys).
        The view not chosen is brought in line with the chosen one, so that switching
        between them after an error shows the same contract."""
        values = {spec.name: _typed(post.get(spec.name, "")) for spec in TYPED}
        row_counts = {}
        for rows in ROWS:
            # Blank rows are dropped and the rest numbered again from 0, so that a row's
            # index is its entry's index in the contract sent (and in the server's paths).
            filled = [row for row in _posted_rows(post, rows)
                      if any(text.strip() for text in row.values())]
            row_counts[rows.member] = len(filled)
            for index, row in enumerate(filled):
                values.update({f"{rows.member}-{index}-{name}": text
                               for name, text in row.items()})
        form = cls(values, row_counts, list(post.getlist("dependencies-workItems")),
                   list(dependency_choices),
                   editor=JSON if post.get("editor") == JSON else FORM,
                   contract_json=_typed(post.get(JSON_INPUT, "")))
        contract = form.contract()
        if contract is None:
            return form
        if form.editor == FORM:
            form.contract_json = _pretty(contract)
            return form
        synced = cls.from_contract(contract, dependency_choices)
        synced.editor, synced.contract_json = JSON, form.contract_json
        return synced

    def contract(self) -> dict | None:
        """The contract to send, or None when an input could not be read (then the reasons
        are in `errors`, by input name)."""
        document, problems = (self._from_json() if self.editor == JSON else self._from_inputs())
        for name, message in problems.items():
            self._add(name, message)
        self.sent = None if problems else document
        return self.sent

    def add_server_error(self, error: dict) -> None:
        """Show a refusal ({code, message, details}, as the pipeline answers) beside the
        input its `details.path` names, or the nearest row or fieldset enclosing it. The
        server names the first violation of the schema it finds; an INVALID_CONTRACT
        brings every other one of the contract sent along, each beside its own input, so
        that an empty form says at once all that it lacks."""
        self._place(error)
        if error.get("code") == "INVALID_CONTRACT" and self.sent is not None:
            for other in violations(schemas.CONTRACT, self.sent, "INVALID_CONTRACT",
                                    "Work Contract", prefix="body.contract"):
                self._place(other.as_json()["error"])

    def _place(self, error: dict) -> None:
        message = error.get("message", "")
        path = (error.get("details") or {}).get("path")
        target = self._target(error.get("code"), path, message)
        if target is None:
            self.form_errors.append(message)
        elif target == JSON_INPUT:  # the path is all that says where in the JSON
            self._add(target, message)
        else:  # beside its input, the path goes without saying
            self._add(target, (path and message.partition(f"{path}: ")[2]) or message)

    def as_post(self) -> dict:
        """What a browser posts for this form unchanged (for tests and scripted use)."""
        data = {name: value for name, value in self.values.items()
                if value or name not in CHECKBOX_NAMES}  # a clear checkbox is not posted
        data.update({"dependencies-workItems": list(self.work_items), "editor": self.editor,
                     JSON_INPUT: self.contract_json})
        return data

    # --- drawing

    @property
    def sections(self) -> list:
        return [
            self._section("purpose", "Goal", self._group("", "", GOAL)),
            self._rows_section(DELIVERABLES),
            self._rows_section(CRITERIA),
            self._rows_section(INPUTS),
            self._section("dependencies", "Dependencies", self._group("", "", DEPENDENCIES)),
            self._section("allowed", "Allowed", self._group("", "", ALLOWED),
                          hint="What the work may use; nothing is allowed that is not listed."),
            self._rows_section(CAPABILITIES),
            self._section("schedule", "Schedule & priority", self._group("", "", SCHEDULE)),
            self._section("budgets", "Budgets",
                          self._group("budgets-financial", "Financial", FINANCIAL),
                          self._group("", "", COUNTS),
                          hint="Leave a dimension blank to budget nothing for it."),
            self._section("retry", "Retry", self._group("", "", ATTEMPTS),
                          self._group("retry-backoff", "Backoff", BACKOFF),
                          self._group("", "", RETRY_DEADLINE),
                          self._group("retry-maxCost", "Maximum cost (optional)", MAX_COST)),
            self._section("risk", "Risk", self._group("", "", RISK)),
        ]

    @property
    def json_field(self) -> Field:
        return Field(JSON_INPUT, "The contract as JSON", JSON_TEXT, self.contract_json,
                     hint="Sent instead of the form when “this JSON” is chosen above. Edits "
                          "in one are not copied to the other before you send.",
                     errors=self.errors.get(JSON_INPUT, []))

    @property
    def json_open(self) -> bool:
        return self.editor == JSON or bool(self.errors.get(JSON_INPUT))

    def _section(self, key, legend, *groups, hint="", add_label="") -> Section:
        return Section(key, legend, list(groups), self.errors.get(key, []), hint, add_label)

    def _group(self, key, legend, specs, row=False, **template) -> Group:
        """A row's inputs are named after it (deliverables-0-id); the others are whole."""
        fields = [self._field(spec, f"{key}-{spec.name}" if row else spec.name)
                  for spec in specs]
        return Group(key, legend, fields, self.errors.get(key, []), **template)

    def _rows_section(self, rows: Rows) -> Section:
        filled = self.row_counts.get(rows.member, 0)
        noun = rows.noun.capitalize()
        # The filled rows, one blank row (all that is needed without JavaScript) and the
        # template the "Add" button copies, whose __index__ the script replaces.
        groups = [self._group(f"{rows.member}-{index}", f"{noun} {index + 1}", rows.inputs,
                              row=True) for index in range(filled + 1)]
        groups.append(self._group(f"{rows.member}-__index__", f"{noun} __number__",
                                  rows.inputs, row=True, template=True,
                                  next_index=filled + 1))
        hint = " ".join(filter(None, [rows.hint, "Clear every field of a row to remove it."]))
        return self._section(rows.member, rows.legend, *groups, hint=hint,
                             add_label=rows.add_label)

    def _field(self, spec: Input, name: str) -> Field:
        value = self.values.get(name, "")
        hint = spec.hint
        if spec.optional and spec.kind != CHECKBOX:
            hint = f"Optional. {hint}".strip()
        if spec.kind == CHECKBOXES:
            listed = list(self.dependency_choices)
            known = {i for i, _ in listed}
            # a dependency the choices do not offer stays, so the contract is kept whole
            listed += [(i, i) for i in self.work_items if i not in known]
            choices = [Choice(i, label, i in self.work_items) for i, label in listed]
            hint = "" if listed else "There is no other WorkItem in this Mission."
        else:
            offered = list(spec.choices)
            if spec.kind == SELECT and value not in {v for v, _ in offered}:
                offered.append((value, value))  # kept, for the server to judge
            choices = [Choice(v, label, v == value) for v, label in offered]
        return Field(name, spec.label, spec.kind, value, choices, hint,
                     self.errors.get(name, []))

    # --- reading

    def _from_json(self) -> tuple:
        document, problem = _parse_json(self.contract_json)
        if problem:
            return None, {JSON_INPUT: problem}
        if not isinstance(document, dict):
            return None, {JSON_INPUT: "The contract must be a JSON object: {…}."}
        return document, {}

    def _from_inputs(self) -> tuple:
        problems: dict[str, str] = {}
        contract: JsonObject = {"schema": SCHEMA_ID}
        for spec in SCALARS:
            value = self._read(spec, spec.name, problems)
            if value is not UNSET:
                _put(contract, spec.name.split("-"), value)
        for rows in ROWS:
            entries = []
            for index in range(self.row_counts.get(rows.member, 0)):
                entry = {}
                for spec in rows.inputs:
                    value = self._read(spec, f"{rows.member}-{index}-{spec.name}", problems)
                    if value is not UNSET:
                        entry[spec.name] = value
                entries.append(entry)
            if entries or rows.required:
                contract[rows.member] = entries
        # Required objects are sent even when every input in them is blank, so that the
        # server names the missing member inside rather than the object.
        contract.setdefault("budgets", {})
        contract.setdefault("retry", {}).setdefault("backoff", {})
        return {key: contract[key] for key in ORDER if key in contract}, problems

    def _read(self, spec: Input, name: str, problems: dict):
        if spec.kind == CHECKBOXES:
            return list(self.work_items)
        text = self.values.get(name, "").strip()
        if spec.kind == CHECKBOX:
            return True if text else (UNSET if spec.optional else False)
        if not text:
            return UNSET
        if spec.kind == NAMES:
            return [line.strip() for line in text.splitlines() if line.strip()]
        if spec.kind in (INTEGER, NUMBER) and len(text.lstrip("-").split(".")[0]) > MAX_DIGITS:
            problems[name] = f"Enter a number of at most {MAX_DIGITS} digits."
        elif spec.kind == INTEGER:
            if WHOLE.fullmatch(text):
                return int(text)
            problems[name] = "Enter a whole number, like 1000."
        elif spec.kind == NUMBER:
            if WHOLE.fullmatch(text):
                return int(text)
            if DECIMAL.fullmatch(text):
                return float(text)
            problems[name] = "Enter a number, like 2 or 1.5."
        elif spec.kind == JSON_TEXT:
            value, problem = _parse_json(text)
            if problem is None:
                return value
            problems[name] = problem
        else:
            return text
        return UNSET

    # --- errors

    def _add(self, target: str, message: str) -> None:
        messages = self.errors.setdefault(target, [])
        if message not in messages:
            messages.append(message)

    def _target(self, code, path, message) -> str | None:
        """The input, row or member fieldset a refusal belongs to; None for the form."""
        if self.editor == JSON:
            return JSON_INPUT  # its message names the path within the JSON
        if code == "DEPENDENCY_CYCLE":
            return "dependencies-workItems"
        inside = CONTRACT_MEMBER.fullmatch(path) if isinstance(path, str) else None
        if inside is None:
            return None
        parts = re.findall(r"[^.\[\]]+", inside[1])
        missing, repeated = MISSING.search(message), REPEATED.search(message)
        if missing:  # "body.contract.retry: 'maxAttempts' is required" -> retry-maxAttempts
            parts.append(missing[1])
        elif repeated and len(parts) == 1:  # the second row with the repeated id
            member = parts[0]
            rows = [i for i in range(self.row_counts.get(member, 0))
                    if self.values.get(f"{member}-{i}-id", "").strip() == repeated[1]]
            parts += [str(rows[1]), "id"] if len(rows) > 1 else []
        targets = self._targets()
        while parts:
            if "-".join(parts) in targets:
                return "-".join(parts)
            parts.pop()
        return None

    def _targets(self) -> set:
        names = set()
        for section in self.sections:
            names.add(section.key)
            for group in section.groups:
                if not group.template:
                    names.add(group.key)
                    names.update(f.name for f in group.fields)
        return names - {""}


# --- helpers -------------------------------------------------------------------------------

def _posted_rows(post, rows: Rows) -> list:
    """The posted rows of a repeated member in index order, each {field: text}.
    Indices may have gaps (rows added in the browser), so they are found, not counted."""
    indices = sorted({int(match[2]) for match in map(ROW_INPUT.fullmatch, post.keys())
                      if match and match[1] == rows.member})
    return [{spec.name: _typed(post.get(f"{rows.member}-{index}-{spec.name}", ""))
             for spec in rows.inputs} for index in indices]


def _typed(text: str) -> str:
    # Browsers send a textarea's line breaks as CRLF; the contract has plain LF.
    return text.replace("\r\n", "\n")


def _at(document, name: str):
    """The member at an input name's path, or None. Tolerant of any shape, because the
    JSON view may hold anything."""
    value = document
    for part in name.split("-"):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _text(value, kind: str) -> str:
    """A member's value as its input shows it."""
    if kind == CHECKBOX:
        return "on" if value is True else ""
    if value is None:
        return ""
    if kind == NAMES and isinstance(value, list):
        return "\n".join(_text(name, TEXT) for name in value)
    if kind == JSON_TEXT:
        return _pretty(value)
    return value if isinstance(value, str) else json.dumps(value)


def _put(document: dict, path: list, value) -> None:
    for part in path[:-1]:
        document = document.setdefault(part, {})
    document[path[-1]] = value


def _pretty(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _parse_json(text: str) -> tuple:
    """(the value, None), or (None, what keeps it from being read, in words)."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as error:
        return None, f"This is not JSON: {error.msg} (line {error.lineno}, column {error.colno})."
    except ValueError:  # int() refuses over 4,300 digits
        return None, "This JSON holds a number too long to read."
    except RecursionError:
        return None, "This JSON is nested too deeply to read."
