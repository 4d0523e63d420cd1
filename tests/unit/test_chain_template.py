"""chain.Template: the two-step seal hashes exactly the bytes `seal` does."""

import pytest

from mission_weave.core import chain


def _document(data):
    return {"id": None, "groupId": "grp_a", "sequence": None, "type": "lease.expired",
            "occurredAt": "2026-11-29T10:00:00Z", "actor": "system", "commandId": None,
            "missionId": "m", "workItemId": "w\u00e9", "revision": 7, "data": data,
            "prevHash": None}


@pytest.mark.parametrize("data", [
    {"leaseId": "lease_1", "reason": "timeout"},
    {"x": 1.5, "\u00e9t\u00e9": ["\u2028", None, True, -3], "nested": {"b": 1, "a": {}}},
    {},
])
def test_template_seal_equals_seal(data):
    sealed = chain.Template(_document(data)).seal("sys_1", "evt_2", "sha256:" + "a" * 64, 42)
    body = {k: v for k, v in sealed.items() if k != "hash"}
    assert sealed == chain.seal(body)
    assert list(sealed) == list(chain.seal(body))  # the usual member order
    assert chain.check_chain([sealed], "sha256:" + "a" * 64, 42) == []


def test_content_holding_a_mark_is_refused():
    with pytest.raises(ValueError):
        chain.Template(_document({"x": "\x00mw-chain\x00sequence"}))
