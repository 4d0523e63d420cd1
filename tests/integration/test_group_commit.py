"""Group commit against real PostgreSQL (apps/ledger/group_commit.py, pipeline._together):
commands that arrive together in one process are decided in one transaction, each on
what the ones before it wrote, with its own answer and record; a rejected command keeps
nothing but its record; a repeated id in the same batch is answered as a duplicate; and
the log stays gapless, chained and equal to its replay."""

import pytest

from apps.ledger import pipeline
from apps.ledger.models import CommandRecord, Event
from apps.ledger.verify import verify_group
from tests.integration.test_races import Cast, post, race

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def batches(monkeypatch):
    """The size of every batch the pipeline commits together."""
    sizes = []
    together = pipeline._together

    def counting(batch):
        sizes.append(len(batch))
        together(batch)

    monkeypatch.setattr(pipeline, "_together", counting)
    pipeline._committer.cache_clear()
    yield sizes
    pipeline._committer.cache_clear()


def authorize(cast: Cast, item_id: str) -> dict:
    from tests.support import contract
    return cast.c.envelope("work.authorize", {"missionId": cast.mission_id,
                                              "workItemId": item_id, "contract": contract()})


def test_commands_that_arrive_together_commit_together_and_each_is_answered(batches):
    from apps.operations import metrics
    from tests.integration.test_operations import own

    cast = Cast("gc-many")
    envelopes = [authorize(cast, f"wi-{n}") for n in range(24)]
    counted, setup = own(metrics.GROUP_COMMIT_SIZE, "mw_group_commit_batch_size_sum"), \
        len(batches)

    answers = race([lambda e=e: post(cast.c.token, cast.group_id, e) for e in envelopes])

    assert [status for status, _ in answers] == [200] * 24
    assert {body["events"][0]["workItemId"] for _, body in answers} == \
        {f"wi-{n}" for n in range(24)}
    sequences = sorted(Event.objects.filter(group_id=cast.group_id)
                       .values_list("sequence", flat=True))
    assert sequences == list(range(1, len(sequences) + 1))  # gapless across the batches
    assert max(batches) > 1 and sum(batches) >= 24
    assert own(metrics.GROUP_COMMIT_SIZE, "mw_group_commit_batch_size_sum") - counted == \
        sum(batches[setup:])  # /metrics shows the batch sizes
    assert verify_group(cast.group_id) == []


def test_a_batch_decides_each_command_on_what_the_ones_before_it_wrote(batches):
    cast = Cast("gc-order")
    # The same client-chosen WorkItem id eight times: the first authorizes it, every
    # other is refused by what the first wrote, in the same batch or a later one.
    envelopes = [authorize(cast, "wi-once") for _ in range(8)]

    answers = race([lambda e=e: post(cast.c.token, cast.group_id, e) for e in envelopes])

    assert sorted(status for status, _ in answers) == [200] + [400] * 7
    refused = {body["error"]["code"] for status, body in answers if status != 200}
    assert refused == {"VALIDATION_ERROR"}  # "a WorkItem with id wi-once already exists"
    assert Event.objects.filter(group_id=cast.group_id, type="work.authorized").count() == 1
    assert CommandRecord.objects.filter(group_id=cast.group_id, accepted=False).count() == 7
    assert verify_group(cast.group_id) == []


def test_a_repeated_command_id_in_the_same_batch_is_applied_once(batches):
    cast = Cast("gc-twice")
    envelope = authorize(cast, "wi-twice")

    answers = race([lambda: post(cast.c.token, cast.group_id, envelope)] * 6)

    assert [status for status, _ in answers] == [200] * 6
    assert sorted(body["duplicate"] for _, body in answers) == [False] + [True] * 5
    assert Event.objects.filter(group_id=cast.group_id, type="work.authorized").count() == 1
    assert verify_group(cast.group_id) == []


def test_groups_in_one_batch_keep_their_own_logs(batches):
    casts = [Cast(f"gc-spread-{n}") for n in range(4)]
    calls = [lambda c=c, n=n: post(c.c.token, c.group_id, authorize(c, f"wi-{n}"))
             for c in casts for n in range(4)]

    answers = race(calls)

    assert [status for status, _ in answers] == [200] * 16
    for cast in casts:
        sequences = list(Event.objects.filter(group_id=cast.group_id)
                         .order_by("sequence").values_list("sequence", flat=True))
        assert sequences == list(range(1, len(sequences) + 1))
        assert verify_group(cast.group_id) == []


def test_with_group_commit_off_each_command_has_its_own_transaction(batches, settings):
    settings.MW_GROUP_COMMIT = False
    cast = Cast("gc-off")

    answers = race([lambda n=n: post(cast.c.token, cast.group_id, authorize(cast, f"wi-{n}"))
                    for n in range(6)])

    assert [status for status, _ in answers] == [200] * 6
    assert batches == []
