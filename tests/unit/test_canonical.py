"""Our canonical() must write exactly RFC 8785's bytes (the rfc8785 package is the oracle).

canonical() lets orjson write a document and hands it to rfc8785 when orjson's bytes
would differ (canonical._fast); these check that the bytes are the same either way, and
that the documents where orjson and JCS part are indeed handed over."""

import datetime
import enum
import math
import uuid

import orjson
import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mission_weave.protocol.canonical import _fast, canonical

SAFE_INT = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
ANY_INT = st.integers(min_value=-(2**70), max_value=2**70) | SAFE_INT
# Text weighted toward where escapes and orders part: controls, quote and backslash,
# "/", U+2028/2029, U+007F, U+E000-U+FFFF against characters above U+FFFF.
TRICKY = st.sampled_from(["\x00", "\x08", "\x0b", "\x1f", "\x7f", '"', "\\", "/", "\u2028",
                          "\u2029", "\ufb33", "\ufeff", "\uffff", "\U0001f600", "\U00010000",
                          "e+", "e-", ".0", "1.0", "\u00e9", "1e-7"])
CHARS = st.characters(blacklist_categories=("Cs",))
TEXT = st.lists(TRICKY | CHARS, max_size=12).map("".join)
FLOAT = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 56.0, 1e16, 1e20, 1e21, 1e-6, 1e-7, 1.5e-7, 0.8, 5e-324, 1e23])
JSON = st.recursive(
    st.none() | st.booleans() | SAFE_INT | TEXT | FLOAT,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(TEXT, children, max_size=5),
    max_leaves=30)
UNREPRESENTABLE = st.sampled_from([math.nan, math.inf, -math.inf, 2**53, -(2**53), 2**64])


@settings(max_examples=1500, deadline=None)
@given(JSON)
@example({"\ufb33": 1, "\U0001f600": 2})
@example({"a": [56.0, -0.0, 1e16, 1e-6]})
@example({"s": 'he said "re-run v1.0, 1e-7"', "n": 1.0})
@example({"s": 'a\\"b', "n": 2.0})
@example({"s": ["e-", "e+", "1.0", "re-run", "v2.0"], "n": 0.5, "m": [3.0]})
@example({"s": ["e-", "e+", "1.0", "re-run", "v2.0"], "n": 0.5})
def test_canonical_is_rfc8785(value):
    assert canonical(value) == rfc8785.dumps(value)
    fast = _fast(value)
    assert fast is None or fast == rfc8785.dumps(value)


@settings(max_examples=300, deadline=None)
@given(st.recursive(ANY_INT | UNREPRESENTABLE | TEXT,
                    lambda children: st.lists(children, min_size=1, max_size=3)
                    | st.dictionaries(TEXT, children, min_size=1, max_size=3), max_leaves=8))
def test_what_rfc8785_refuses_canonical_refuses(value):
    try:
        expected = rfc8785.dumps(value)
    except ValueError:
        with pytest.raises(ValueError):
            canonical(value)
    else:
        assert canonical(value) == expected


@pytest.mark.parametrize("value", [
    {"n": 56.0}, [-0.0], 1e16, 1e20, 1e-6, {"\ufb33": 1, "\U0001f600": 2},
    {"n": math.nan}, [math.inf], {"big": 2**53}, {1: "key not a string"},
    {"t": datetime.datetime(2030, 1, 1)}, {"u": uuid.UUID(int=1)}, "\ud800",
])
def test_where_orjson_and_jcs_part_rfc8785_writes_it(value):
    assert _fast(value) is None


def test_orjson_really_parts_from_jcs_there():
    """If a new orjson wrote these as JCS does, _fast's checks could be loosened."""
    option = orjson.OPT_SORT_KEYS
    assert orjson.dumps(56.0, option=option) == b"56.0"
    assert orjson.dumps(1e16, option=option) == b"1e+16"
    assert orjson.dumps(math.nan, option=option) == b"null"
    assert orjson.dumps({"\ufb33": 1, "\U0001f600": 2}, option=option) == \
        '{"\ufb33":1,"\U0001f600":2}'.encode()


def test_documents_like_the_logs_take_the_fast_path():
    event = {"actor": "system", "commandId": None, "data": {
        "estimate": {"confidence": 0.8, "remainingSeconds": 595}, "blockers": [],
        "note": "re-run v1.0 \u00e9\U0001f600", "evidenceRefs": ["sha256:" + "e-" * 32]},
        "groupId": "grp_bench-da34409e-0", "revision": 17, "sequence": 12345}
    assert _fast(event) == rfc8785.dumps(event)


def test_strings_that_look_like_floats_leave_the_fast_path_to_real_floats():
    looks = ["e-", "e+", "1.0", "re-run", "v2.0", 'say "2.0"']  # more than _FEW matches
    assert _fast({"s": looks, "n": 0.5}) == rfc8785.dumps({"s": looks, "n": 0.5})
    assert _fast({"s": looks, "n": [3.0]}) is None
    assert _fast({"s": looks[:2], "n": 1e-7}) is None
    assert canonical({"s": looks, "n": [3.0]}) == rfc8785.dumps({"s": looks, "n": [3.0]})


def test_a_str_enum_and_subclasses_write_as_their_values():
    class Kind(enum.StrEnum):
        A = "a"

    class Count(int):
        pass

    value = {"k": Kind.A, "n": Count(3)}
    assert canonical(value) == rfc8785.dumps(value) == b'{"k":"a","n":3}'


def test_escapes_and_ordering_match_rfc8785():
    value = {"b": "\u0000\u001f\n\t\"\\\u2028\u00e9\U0001f600", "a": [1, -2, True, None],
             "B": {}}
    assert canonical(value) == rfc8785.dumps(value)
    names = {"\u00e9": 1, "z": 2, "\U0001f600": 3, "\uffff": 4}
    assert canonical(names) == rfc8785.dumps(names)
