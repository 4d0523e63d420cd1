"""The SDK client's retries (no server: httpx's MockTransport answers): a 429 waits
what its Retry-After asks, never less than the backoff and never more than a minute;
a transport failure says whether the request may have reached the server."""

import asyncio

import httpx
import pytest

from mission_weave.sdk.client import ApiError, Client, may_have_arrived, retry_after
from mission_weave.sdk.keys import new_key

LIMITED = {"error": {"code": "RATE_LIMITED", "message": "slow down",
                     "details": {"retryAfter": 1}}}


def client_answering(*answers, retries=3):
    calls = []

    def handle(request):
        calls.append(asyncio.get_running_loop().time())
        return answers[min(len(calls), len(answers)) - 1]

    http = httpx.AsyncClient(base_url="http://mw.test", transport=httpx.MockTransport(handle))
    client = Client("http://mw.test", new_key("worker-1"), retries=retries,
                    backoff_seconds=0.01, http=http)
    return client, calls


def test_a_rate_limited_request_waits_its_retry_after_then_succeeds():
    client, calls = client_answering(
        httpx.Response(429, json=LIMITED, headers={"Retry-After": "1"}),
        httpx.Response(200, json={"keys": []}))

    answer = asyncio.run(client.get("/api/v1/authority"))

    assert answer == {"keys": []}
    assert len(calls) == 2 and calls[1] - calls[0] >= 1.0  # not the 0.01 s backoff


def test_a_rate_limit_that_outlasts_the_retries_is_an_api_error():
    client, calls = client_answering(
        httpx.Response(429, json=LIMITED, headers={"Retry-After": "0"}), retries=2)

    with pytest.raises(ApiError) as refused:
        asyncio.run(client.get("/api/v1/authority"))

    assert refused.value.code == "RATE_LIMITED" and len(calls) == 3


@pytest.mark.parametrize("header, seconds", [("2", 2.0), ("0.5", 0.5), ("3600", 60.0),
                                             ("-4", 0.0), ("soon", 0.0), (None, 0.0)])
def test_retry_after_is_read_bounded(header, seconds):
    headers = {"Retry-After": header} if header is not None else {}
    assert retry_after(httpx.Response(429, headers=headers)) == seconds


def test_only_a_request_that_never_left_is_known_not_to_have_arrived():
    assert not may_have_arrived(httpx.ConnectError("refused"))
    assert may_have_arrived(httpx.ReadError("closed mid-answer"))
    lost = httpx.ConnectError("refused on the retry")
    lost.request_sent = True  # an earlier attempt was sent: its answer may be lost
    assert may_have_arrived(lost)
