"""Sample documents shared by every kind of test. Plain data: no Django."""


def contract(**overrides) -> dict:
    """A valid Work Contract v1 with two acceptance criteria (ac1, ac2)."""
    base = {
        "schema": "mwp.work-contract/1",
        "goal": "Summarize the quarterly report",
        "deliverables": [{"id": "summary", "description": "A one-page summary",
                          "mediaType": "text/markdown"}],
        "acceptanceCriteria": [
            {"id": "ac1", "description": "Covers every section"},
            {"id": "ac2", "description": "Under 500 words", "method": "word-count"}],
        "inputs": [{"ref": "sha256:" + "a" * 64, "description": "the report"}],
        "dependencies": {"workItems": [], "policy": "all_verified"},
        "allowed": {"tools": ["search"], "data": [], "operations": ["read"], "resources": {}},
        "capabilities": [{"id": "summarize", "version": "1"}],
        "deadline": "2030-01-01T00:00:00Z",
        "urgency": "normal",
        "businessImpact": "medium",
        "budgets": {"financial": {"amount": "10.00", "currency": "USD"}, "tokens": 100000,
                    "toolCalls": 50, "computeSeconds": 600, "wallClockSeconds": 3600,
                    "sideEffects": 0},
        "retry": {"maxAttempts": 3, "backoff": {"strategy": "exponential", "initialSeconds": 10,
                                                "maxSeconds": 300, "multiplier": 2}},
        "risk": {"class": "low", "requiresExecutionApproval": False},
    }
    base.update(overrides)
    return base
