"""The scale-out run (tests/faults/scale.py) for ~12 s of load: the variant that `make test`
runs (about 25 s with the processes' start and the checks); `make test-faults` runs the
long one instead."""

import pytest

from tests.faults.scale import scale_out

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_two_web_processes_and_two_celery_workers_keep_every_invariant_briefly(tmp_path,
                                                                               figure):
    scale_out(tmp_path, 12, figure)
