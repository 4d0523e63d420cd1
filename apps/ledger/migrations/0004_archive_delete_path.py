"""Archiving moves events out of the online log; nothing else may delete one.

The trigger of 0002 refused every UPDATE and DELETE on ledger_event. It now lets a
DELETE through only when all three hold, so that no other path, raw SQL included, can
drop history:
- the transaction set `mw.archiving` to on for itself (SET LOCAL; apps/ledger/archive.py),
- the Group's online floor was already raised over the event,
- the same event (Group, sequence, id, hash) is already in the archive.
The archive itself refuses every UPDATE and DELETE."""

from django.db import migrations

EVENT_TRIGGER = """
CREATE OR REPLACE FUNCTION ledger_event_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('mw.archiving', true) = 'on'
       AND OLD.sequence <= (SELECT online_floor FROM ledger_group WHERE id = OLD.group_id)
       AND EXISTS (SELECT 1 FROM ledger_archivedevent a
                   WHERE a.group_id = OLD.group_id AND a.sequence = OLD.sequence
                     AND a.event_id = OLD.event_id AND a.hash = OLD.hash) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the event log is append-only (%% on ledger_event)', TG_OP;
END;
$$ LANGUAGE plpgsql;
"""
EVENT_TRIGGER_BEFORE = """
CREATE OR REPLACE FUNCTION ledger_event_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the event log is append-only (%% on ledger_event)', TG_OP;
END;
$$ LANGUAGE plpgsql;
"""
ARCHIVE_TRIGGER = """
CREATE OR REPLACE FUNCTION ledger_archivedevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the event archive is append-only (%% on ledger_archivedevent)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_archivedevent_append_only
    BEFORE UPDATE OR DELETE ON ledger_archivedevent
    FOR EACH ROW EXECUTE FUNCTION ledger_archivedevent_append_only();
"""
DROP_ARCHIVE_TRIGGER = """
DROP TRIGGER IF EXISTS ledger_archivedevent_append_only ON ledger_archivedevent;
DROP FUNCTION IF EXISTS ledger_archivedevent_append_only();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(EVENT_TRIGGER)
        schema_editor.execute(ARCHIVE_TRIGGER)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_ARCHIVE_TRIGGER)
        schema_editor.execute(EVENT_TRIGGER_BEFORE)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0003_archive_and_snapshots")]
    operations = [migrations.RunPython(forwards, backwards)]
