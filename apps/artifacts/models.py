"""Blobs, artifact manifests, Evidence and Context Packages (§13)."""

from django.db import models  # noqa: F401
