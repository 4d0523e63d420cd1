"""A tiny run of `mw_bench --load` (apps/bench/load.py): a few seconds, two Groups, two
lanes, one daphne, two WebSocket subscribers, no Celery. It must finish with a result
whose every part is there, no error, and every event delivered."""

import json

import pytest
from django.core.management import call_command

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_mw_bench_load_runs_a_mixed_workload_beside_the_raw_rate(capsys):
    call_command("mw_bench", "--load", "--seconds", "3", "--groups", "2", "--clients", "2",
                 "--web-workers", "1", "--load-subscribers", "2", "--celery-workers", "0",
                 "--json")
    result = json.loads(capsys.readouterr().out)
    api, websocket, raw = result["api"], result["websocket"], result["raw"]
    assert api["errors"] == {} and api["staleAccepted"] == 0, api["firstErrors"]
    assert api["lifecycles"] >= 2 and api["commands"] > 20
    for operation in ("work.authorize", "work.offer", "work.accept_offer", "work.start",
                      "lease.renew", "work.progress", "blob.put", "artifact.publish",
                      "work.submit", "work.accept_result", "dashboard.group", "api.work_item"):
        assert api["latency"][operation]["n"] > 0, operation
    assert websocket["subscribers"] == 2 and websocket["missing"] == 0
    assert websocket["deliveries"] > 0
    assert raw["transactions"] >= api["commands"] and raw["transactionsPerSecond"] > 0
    assert result["ratio"] == round(api["commandsPerSecond"] / raw["transactionsPerSecond"], 3)
