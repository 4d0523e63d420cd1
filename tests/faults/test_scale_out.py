"""The scale-out run for ~40 s (tests/faults/scale.py): `make test-faults`."""

import pytest

from tests.faults.scale import scale_out

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_web_processes_and_two_celery_workers_keep_every_invariant(tmp_path, figure):
    scale_out(tmp_path, 40, figure)
