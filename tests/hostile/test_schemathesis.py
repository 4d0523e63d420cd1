"""Schemathesis against the OpenAPI document the server serves (GET /api/v1/schema/).

Every operation of the document gets requests generated from its schemas, valid ones and
invalid ones (schemathesis' positive and negative modes), sent through the production ASGI
application in this process (mission_weave/asgi.py: the pooled handler of
mission_weave/runtime/http_handler.py, every middleware, real commits on PostgreSQL, eager
review tasks).
The hook of tests/hostile/attacker.py gives them real credentials and signatures and the ids
of a live Cast (tests/hostile/cast.py), so they reach the decisions, not just the door.

Each answer is checked by schemathesis' own checks: no 5xx (`not_a_server_error`), a status
the operation documents (`status_code_conformance`), its documented media type
(`content_type_conformance`) and body schema (`response_schema_conformance`). A failure
does not stop the run: every case is checked, and the totals are printed at the end.

MW_HOSTILE_CASES sets how many cases (default 300: the smoke run inside `make test`;
`make test-hostile` runs 50,000)."""

import math
import os
import random
import time
import traceback
import uuid
import zlib
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.hostile.attacker import COMMANDS_PATH, Attacker
from tests.hostile.cast import Cast

CASES = int(os.environ.get("MW_HOSTILE_CASES", "300"))
# The run's seed (printed): the hook's draws and each operation's Hypothesis seed.
SEED = int(os.environ.get("MW_HOSTILE_SEED") or random.randrange(2**32))
CHECKS = (not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance)
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
REFILL_EVERY = 2500  # cases between fresh WorkItems in every state (Attacker.refill)
# Shares of the cases (1 for the rest): the commands endpoint carries 35 command types;
# its invalid envelopes mostly stop at the envelope's schema, its valid ones go deeper.
WEIGHTS = {(COMMANDS_PATH, schemathesis.GenerationMode.POSITIVE): 10,
           (COMMANDS_PATH, schemathesis.GenerationMode.NEGATIVE): 4}
EXAMPLES_SHOWN = 3  # failing cases printed per check


# Failures already pinned by a strict xfail test of their own (with the fix it needs): counted
# and printed apart, so that the run still fails on anything else. None at present.
KNOWN: dict = {}


class Tally:
    """Cases sent, answers by status and code, failures by check (with a few examples)."""

    def __init__(self):
        self.cases = 0
        self.answers = Counter()  # (status, error code or "") -> count
        self.command_answers = Counter()  # the same, of POST .../commands alone
        self.accepted_commands = 0
        self.failures = Counter()
        self.known = Counter()  # KNOWN's reasons -> count
        self.examples: dict = {}

    def count(self, case, response) -> None:
        self.cases += 1
        code = ""
        if response.status_code >= 400:
            try:
                code = response.json()["error"]["code"]
            except Exception:
                code = "(not the error envelope)"
        self.answers[(response.status_code, code)] += 1
        if case.operation.path == COMMANDS_PATH:
            self.command_answers[(response.status_code, code)] += 1
            self.accepted_commands += response.status_code == 200

    def fail(self, check: str, case, response, group: FailureGroup) -> None:
        reason = next((why for known, why in KNOWN.items() if known(check, case, response)),
                      None)
        if reason is not None:
            self.known[reason] += 1
            return
        self.failures[check] += 1
        shown = self.examples.setdefault(check, [])
        if len(shown) < EXAMPLES_SHOWN:
            shown.append(f"{case.method} {case.formatted_path} -> {response.status_code}: "
                         f"{[f.title for f in group.exceptions]} "
                         f"{response.text[:300]!r}\n      body: {str(case.body)[:400]}")

    def crashed(self, operation, mode, error: Exception) -> None:
        self.failures["crash"] += 1
        self.examples.setdefault("crash", []).append(
            f"{operation.label} ({mode.value}): "
            + "".join(traceback.format_exception(error))[-3000:])

    def report(self, seconds: float) -> str:
        lines = [f"schemathesis (MW_HOSTILE_SEED={SEED}): {self.cases} cases in "
                 f"{seconds:.0f} s ({self.cases / seconds:.0f} cases/s), "
                 f"{self.accepted_commands} commands accepted"]
        lines.append("failures by check: " + ", ".join(
            f"{check.__name__}={self.failures[check.__name__]}" for check in CHECKS)
            + f"; crashed runs: {self.failures['crash']}")
        for check, shown in self.examples.items():
            lines += [f"  {check}:"] + [f"    {example}" for example in shown]
        lines += [f"known (xfail elsewhere): {reason} x{n}" for reason, n in self.known.items()]
        for title, answers in (("answers", self.answers),
                               ("of them commands", self.command_answers)):
            lines.append(f"{title}: " + ", ".join(f"{status} {code}".strip() + f" x{n}"
                                                 for (status, code), n in
                                                 answers.most_common()))
        return "\n".join(lines)


def run_operation(operation, mode, examples: int, attacker: Attacker, tally: Tally,
                  run_seed: int) -> int:
    """Up to `examples` generated cases of one operation; how many were sent."""
    before = tally.cases

    @seed(run_seed)
    @given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis_settings(max_examples=examples, database=None, deadline=None,
                         phases=[Phase.generate], suppress_health_check=list(HealthCheck),
                         derandomize=False)
    def send(case):
        if tally.cases and tally.cases % REFILL_EVERY == 0:
            attacker.refill()
        response = case.call()
        tally.count(case, response)
        for check in CHECKS:
            try:
                case.validate_response(response, checks=[check])
            except FailureGroup as group:
                tally.fail(check.__name__, case, response, group)

    try:
        send()
    except Unsatisfiable:  # nothing to generate: e.g. invalid input of an operation with none
        pass
    except Exception as error:  # the hook, the transport or the app itself raised
        tally.crashed(operation, mode, error)
    return tally.cases - before


def run(schema, attacker: Attacker, total: int) -> Tally:
    """Rounds over every operation and both modes, in a shuffled order, each its weighted
    share of what is left, until `total` cases are sent. An operation whose inputs ran out
    (Hypothesis found no new ones) leaves the rounds."""
    tally = Tally()
    order = random.Random(SEED)
    live = [(operation, mode) for result in schema.get_all_operations()
            for operation in [result.ok()] for mode in MODES]
    rounds = 0
    while tally.cases < total and live:
        rounds += 1
        weight = sum(weight_of(*entry) for entry in live)
        remaining = total - tally.cases
        quotas = [(entry, math.ceil(remaining * weight_of(*entry) / weight)) for entry in live]
        order.shuffle(quotas)
        for (operation, mode), quota in quotas:
            quota = min(quota, total - tally.cases)
            if quota <= 0:
                break
            run_seed = zlib.crc32(f"{SEED}/{rounds}/{operation.label}/{mode.value}".encode())
            if run_operation(operation, mode, quota, attacker, tally, run_seed) < quota / 2:
                live.remove((operation, mode))
    return tally


def weight_of(operation, mode) -> int:
    return WEIGHTS.get((operation.path, mode), 1)


@pytest.fixture
def app():
    from mission_weave.asgi import application

    return application


@pytest.mark.django_db(transaction=True)
def test_generated_requests_never_fail_the_server_or_the_document(app, eager, capsys):
    cast = Cast()
    sessions = cast.home.agent(f"sessions-{uuid.uuid4().hex[:8]}", roles=("observer",))
    stale = sessions.token
    assert sessions.open_session().status_code == 201  # `stale` is superseded now
    schema = schemathesis.openapi.from_asgi("/api/v1/schema/?format=json", app)
    attacker = Attacker(cast, sessions, stale, SEED)

    @schema.hook
    def map_case(context, case):
        return attacker.map_case(context, case)

    started = time.monotonic()

    tally = run(schema, attacker, CASES)

    with capsys.disabled():
        print("\n" + tally.report(time.monotonic() - started))
    assert tally.cases >= CASES
    assert tally.failures == {}, tally.report(time.monotonic() - started)
