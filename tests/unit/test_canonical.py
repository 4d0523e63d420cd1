"""Our canonical() must write exactly RFC 8785's bytes (the rfc8785 package is the oracle)."""

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from mission_weave.protocol.canonical import canonical

SAFE_INT = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
JSON = st.recursive(
    st.none() | st.booleans() | SAFE_INT | TEXT
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(TEXT, children, max_size=5),
    max_leaves=30)


@settings(max_examples=500, deadline=None)
@given(JSON)
def test_canonical_is_rfc8785(value):
    assert canonical(value) == rfc8785.dumps(value)


def test_escapes_and_ordering_match_rfc8785():
    value = {"b": "\u0000\u001f\n\t\"\\\u2028\u00e9\U0001f600", "a": [1, -2, True, None],
             "B": {}}
    assert canonical(value) == rfc8785.dumps(value)
    names = {"\u00e9": 1, "z": 2, "\U0001f600": 3, "\uffff": 4}
    assert canonical(names) == rfc8785.dumps(names)
