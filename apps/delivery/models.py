"""Durable delivery Cursors (PROTOCOL §4)."""

from django.db import models  # noqa: F401
