"""Indexes for the Group log page's filters (apps/dashboard/log_page.py, issue 27): each
filter's page is read newest first from a bound, `... AND sequence < before ORDER BY
sequence DESC LIMIT 51`, and with only (group_id, sequence) PostgreSQL walks the Group's
log backwards until it has found 51 matching events: 170 ms for a Mission halfway down a
log of 1,000,000 events, 400-600 ms for a filter nothing matches. With the filter's
column between the Group and the sequence, each page is an index range read in order,
stopped by the LIMIT, at any depth. The WorkItem filter has its index already
((group, work_item_id, sequence), in the models).

- (group_id, type, sequence): the type filter; it also answers "which types does this
  Group's log hold" by a skip scan, one probe per type (log_page.event_types);
- (group_id, mission_id, sequence): the Mission filter;
- (group_id, split_part(actor, ':', 1), sequence): the actor kind filter, whose three
  kinds are the part of the actor before its colon ("user", "agent", "system");
  log_page.Filters asks for it with that expression and keeps the original condition.

The same three on the archive, which the page reads in the same statement. Every
appended event writes three more index entries (the append path's cost, measured in
docs/performance.md). Declared here, not in the models' Meta (which makemigrations
would also require of apps/ledger/models.py), and built CONCURRENTLY: a log this size
is not locked against appends while they are made."""

from django.db import migrations

INDEXES = [("ledger_event", "event_type_seq", "group_id, type, sequence"),
           ("ledger_event", "event_mission_seq", "group_id, mission_id, sequence"),
           ("ledger_event", "event_actor_kind_seq",
            "group_id, split_part(actor, ':', 1), sequence"),
           ("ledger_archivedevent", "archived_event_type_seq", "group_id, type, sequence"),
           ("ledger_archivedevent", "archived_event_mission_seq",
            "group_id, mission_id, sequence"),
           ("ledger_archivedevent", "archived_event_actor_kind_seq",
            "group_id, split_part(actor, ':', 1), sequence")]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('ledger', '0006_distribution_keys'),
    ]

    operations = [
        migrations.RunSQL(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} ({columns})",
                          f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        for table, name, columns in INDEXES
    ]
