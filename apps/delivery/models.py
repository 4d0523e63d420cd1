"""Durable delivery Cursors (PROTOCOL §4).

A Cursor is Group data: in the database its primary key is (id, group_id) (migration
0002; Django's state keeps `id` as the pk), so that it can be distributed by group_id
(tests/integration/test_distribution_keys.py)."""

from django.db import models


class Cursor(models.Model):
    """How far a principal has acknowledged a Group's log. Monotonic and never above
    the Group's head; acknowledging never deletes history."""

    principal = models.CharField(max_length=200)
    group = models.ForeignKey("ledger.Group", on_delete=models.CASCADE, related_name="+")
    sequence = models.BigIntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["principal", "group"], name="one_cursor_per_member"),
            models.CheckConstraint(condition=models.Q(sequence__gte=0),
                                   name="cursor_not_negative"),
        ]

    def __str__(self):
        return f"{self.principal}@{self.group_id}:{self.sequence}"
