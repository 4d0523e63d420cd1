"""The pure core: the protocol's rules as plain functions over plain data.

No Django, no Celery, no Channels, nothing of apps/, and no clock: time comes in as an
argument. The shell apps (apps/) load state, call these functions and write what they
return; tests/test_architecture.py keeps it so (docs/architecture.md).
"""
