"""`manage.py mw_distribute` and what differs on Citus (docs/operations.md, "Past one
database"). On plain PostgreSQL (`make test`): the command refuses and changes nothing.
On a cluster (`make test-citus`, tests/citus.py): the test database is distributed as
the catalog says, and the paths Citus changes hold: the append-only log on the shards,
archiving's SET LOCAL reaching them, a group-commit batch and a forwarding over Groups on
two nodes (two-phase commit), sweep claims on the coordinator."""

import io
import json

import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from apps.identity import registry
from apps.ledger import distribution, pipeline
from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from apps.work import sweeper
from tests import citus
from tests.integration.artifact_helpers import published
from tests.integration.test_distribution_keys import problems
from tests.integration.test_races import Cast, post, race
from tests.support import Scenario, contract

on_cluster = pytest.mark.skipif(not citus.URL, reason="needs a Citus cluster: make test-citus")
on_plain = pytest.mark.skipif(bool(citus.URL), reason="plain PostgreSQL only")


def database_settings() -> list:
    with connection.cursor() as cursor:
        cursor.execute("SELECT setconfig FROM pg_db_role_setting s JOIN pg_database d "
                       "ON d.oid = s.setdatabase WHERE d.datname = current_database()")
        return cursor.fetchall()


@on_plain
@pytest.mark.django_db
def test_without_citus_it_refuses_and_changes_nothing():
    before = database_settings()

    with pytest.raises(CommandError, match=r"NOT_CITUS: database \S+ has no Citus extension"):
        call_command("mw_distribute")

    assert database_settings() == before
    assert not distribution.on_citus() and distribution.on_coordinator()


@pytest.mark.django_db
def test_a_sweeper_that_is_not_on_the_coordinator_refuses_to_sweep(monkeypatch):
    monkeypatch.setattr(distribution, "on_coordinator", lambda: False)

    with pytest.raises(ImproperlyConfigured, match="must connect to the coordinator"):
        sweeper.sweep()


def node_of(group_id: str) -> int:
    """The port of the worker holding the Group's shard (the Group need not exist)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT nodeport FROM citus_shards WHERE table_name = "
                       "'ledger_group'::regclass AND shardid = "
                       "get_shard_id_for_distribution_column('ledger_group', %s::text)", [group_id])
        return cursor.fetchone()[0]


def slugs_on_two_nodes(prefix: str) -> tuple[str, str]:
    """Two Group slugs whose Groups' shards are on different workers."""
    first = f"{prefix}-a"
    other = next(f"{prefix}-b{n}" for n in range(100)
                 if node_of(f"grp_{prefix}-b{n}") != node_of(f"grp_{first}"))
    return first, other


def on_two_nodes(prefix: str) -> tuple[Scenario, Scenario]:
    return tuple(Scenario(slug) for slug in slugs_on_two_nodes(prefix))


@on_cluster
@pytest.mark.django_db
def test_the_schema_is_distributed_by_group_as_the_catalog_says():
    with connection.cursor() as cursor:
        reference, distributed = distribution.layout(cursor)
        cursor.execute("SELECT table_name::text, citus_table_type, distribution_column, "
                       "colocation_id FROM citus_tables")
        tables = {name: rest for name, *rest in cursor.fetchall()}
    colocation = tables[distribution.GROUPS][2]

    assert tables[distribution.GROUPS] == ["distributed", "id", colocation]
    others = [t for t in distributed if t != distribution.GROUPS]
    assert {t: tables.get(t) for t in others} == {
        t: ["distributed", "group_id", colocation] for t in others}
    assert {t: tables.get(t, ["local"])[0] for t in reference} == dict.fromkeys(
        reference, "reference")
    assert "identity_membership" in distributed and "auth_user" in reference
    assert problems() == []
    assert distribution.on_citus() and distribution.on_coordinator()


@on_cluster
@pytest.mark.django_db
def test_running_it_again_changes_nothing_and_checks_the_catalog(capsys):
    call_command("mw_distribute")

    out = capsys.readouterr().out
    assert '"created": {"reference": [], "distributed": []}' in out and '"ok": true' in out


@on_cluster
@pytest.mark.django_db
def test_the_shards_refuse_to_rewrite_the_log(scenario):
    group_id = scenario.world.group.id
    for statement in ("UPDATE ledger_event SET type = 'x' WHERE group_id = %s",
                      "DELETE FROM ledger_event WHERE group_id = %s"):
        with pytest.raises(DatabaseError, match="the event log is append-only"), \
                transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement, [group_id])
    with pytest.raises(DatabaseError, match="the event log is append-only"), \
            transaction.atomic(), connection.cursor() as cursor:
        # the archive path's permission asked for, without the rows archived
        cursor.execute("SET LOCAL mw.archiving = on")
        cursor.execute("DELETE FROM ledger_event WHERE group_id = %s", [group_id])
    assert Event.objects.filter(group_id=group_id).count() == scenario.world.head


@on_cluster
@pytest.mark.django_db
def test_archiving_reaches_the_shards():
    a, b = on_two_nodes("archived")
    for s in (a, b):
        result = call_command_json("mw_snapshot", s.world.group.id, "--archive")
        assert result["onlineFloor"] == s.world.head
        assert not Event.objects.filter(group_id=s.world.group.id).exists()


def call_command_json(*args) -> dict:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return json.loads(out.getvalue())


class RemoteCommands:
    """What the coordinator sends the workers meanwhile (citus.log_remote_commands: a
    notice each, naming the server)."""

    def __enter__(self):
        self.sent: list[str] = []
        connection.ensure_connection()
        self.raw = connection.connection
        self.raw.add_notice_handler(self.heard)
        with connection.cursor() as cursor:
            cursor.execute("SET citus.log_remote_commands = on")
        return self

    def heard(self, diagnostic):
        self.sent.append(f"{diagnostic.message_primary} {diagnostic.message_detail}")

    def __exit__(self, *exc):
        with connection.cursor() as cursor:
            cursor.execute("RESET citus.log_remote_commands")
        self.raw.remove_notice_handler(self.heard)

    def servers(self, command: str) -> set[str]:
        """The servers `command` was sent to ("on server postgres@host:port ...")."""
        return {line.split("on server ")[1].split()[0] for line in self.sent
                if command in line and "on server " in line}


@on_cluster
@pytest.mark.django_db(transaction=True)
def test_a_forwarding_between_groups_on_two_nodes_commits_on_both_by_two_phase_commit():
    a, b = on_two_nodes("forward")
    item_id, _ = a.running()
    artifact = published(a, item_id, b"A's summary for finance")
    registry.add_member(b.world.group, a.c.principal, ["coordinator"])
    a.owner.ok("artifact.approve_forwarding", {"hash": artifact,
                                               "targetGroupId": b.world.group.id})

    with RemoteCommands() as remote:
        [sent] = a.c.ok("artifact.forward", {"hash": artifact,
                                             "targetGroupId": b.world.group.id})

    received = Event.objects.get(group_id=b.world.group.id, type="artifact.received")
    assert received.command_id == sent["commandId"]
    prepared = remote.servers("PREPARE TRANSACTION")
    assert len(prepared) == 2, remote.sent  # both workers, prepared before either commits
    assert remote.servers("COMMIT PREPARED") == prepared


@on_cluster
@pytest.mark.django_db(transaction=True)
def test_a_group_commit_batch_over_groups_on_two_nodes_commits_all_of_it(monkeypatch):
    slugs = slugs_on_two_nodes("batch")
    casts = [Cast(slug) for slug in slugs]
    batches, alone = [], []
    together, by_itself = pipeline._together, pipeline._alone
    monkeypatch.setattr(pipeline, "_together", lambda batch: (
        batches.append({p.group_id for p in batch}), together(batch)))
    monkeypatch.setattr(pipeline, "_alone", lambda *args: (
        alone.append(args), by_itself(*args))[1])
    pipeline._committer.cache_clear()
    try:
        envelopes = [(cast, cast.c.envelope("work.authorize", {
            "missionId": cast.mission_id, "workItemId": f"wi-{n}", "contract": contract()}))
            for n in range(12) for cast in casts]
        answers = race([lambda c=c, e=e: post(c.c.token, c.group_id, e) for c, e in envelopes])
    finally:
        pipeline._committer.cache_clear()

    assert [status for status, _ in answers] == [200] * len(envelopes)
    assert any(len(groups) == 2 for groups in batches), batches  # a batch over both nodes
    assert alone == []  # no batch failed back to one command per transaction
    for cast in casts:
        assert verify_group(cast.group_id) == []


@on_cluster
@pytest.mark.django_db(transaction=True)
def test_two_sweepers_cannot_both_claim_a_group(scenario):
    group_id = scenario.world.group.id
    # another sweeper's session, on the coordinator as every sweeper's is
    other = psycopg.connect(f"{citus.URL.rsplit('/', 1)[0]}/{connection.settings_dict['NAME']}",
                            autocommit=True)
    with other:
        other.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", [sweeper.CLAIMS, group_id])
        with sweeper._claim(group_id) as claimed:
            assert not claimed
        other.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))",
                      [sweeper.CLAIMS, group_id])
    with sweeper._claim(group_id) as claimed:
        assert claimed
