"""canonical.loads_in_domain, orjson's shortcut for the JSON domain check, against the way
a body was read before: json.loads (NaN and Infinity refused), then domain_problem's walk.

Wherever the shortcut answers, json.loads must give the same value (types, key order and
the sign of zero included), and where it says `proven`, the walk must find nothing. Where
it cannot tell, it answers None and the caller reads the text the old way, so every
refusal stays the walk's or the parser's. The texts are written here piece by piece, so
that they hold what a serializer would never write: duplicate member names, lone
surrogate escapes, U+0000, integers of any length, numbers that overflow, deep nesting."""

import json
import math

from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from mission_weave.protocol.canonical import MAX_DEPTH, domain_problem, loads_in_domain


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def old_reading(data: bytes | str, max_depth: int):
    """The body's value and its domain problem as read before, or the parser's refusal."""
    try:
        value = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        return "refused", type(error).__name__
    return "parsed", value, domain_problem(value, max_depth)


def same(a, b) -> bool:
    """Equal, and of the same types throughout: dicts in the same key order, floats with
    the same sign (-0.0 is not 0.0), no int standing in for a float or the reverse."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


def check(data: bytes | str, max_depth: int) -> str:
    """What the shortcut did with `data`: 'proven', 'walked' or 'handed back'."""
    fast = loads_in_domain(data, max_depth)
    if fast is None:
        return "handed back"  # the caller reads it the old way: nothing can differ
    value, proven = fast
    old = old_reading(data, max_depth)
    assert old[0] == "parsed", (data, old)
    assert same(value, old[1]), (data, value, old[1])
    if proven:
        assert old[2] is None, (data, old[2])
    return "proven" if proven else "walked"


# --- JSON texts, piece by piece ------------------------------------------------------------

WS = st.sampled_from(["", "", "", " ", "\n", "\t", "\r\n", "  "])
DIGITS = st.text("0123456789", min_size=1, max_size=22)
INT_TEXT = st.integers(-(2**70), 2**70).map(str) | st.sampled_from(
    ["-0", "0", "9007199254740991", "-9007199254740991", "9007199254740992",
     "-9007199254740992", "999999999999999", "1000000000000000", "9223372036854775807",
     "9223372036854775808", "18446744073709551615", "18446744073709551616",
     "-9223372036854775809", "00", "01", "-"])
FLOAT_TEXT = st.builds(
    lambda sign, whole, frac, exp: f"{sign}{whole}{frac}{exp}",
    st.sampled_from(["", "-"]), st.sampled_from(["0", "1", "12", "9"]) | DIGITS,
    st.sampled_from(["", ".0", ".5", "."]) | DIGITS.map(lambda d: "." + d),
    st.sampled_from(["", "e5", "E-3", "e+308", "e309", "e-400", "E400", "e", "e-324"])
    | st.integers(-400, 400).map(lambda n: f"e{n}"))
NUMBER_TEXT = INT_TEXT | FLOAT_TEXT | st.floats(allow_nan=False).map(
    lambda f: repr(f) if math.isfinite(f) else ("1e400" if f > 0 else "-1e400")) | \
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-400", "0.1",
                     "5e-324", "1.7976931348623157e308", "1.7976931348623159e308",
                     "123456789.123456789", "0.30000000000000004"])
ESCAPES = st.sampled_from([
    '\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0000", "\\u0041",
    "\\u00e9", "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\ud800\\u0041",
    "\\uDBFF\\uDFFF", "\\u2028", "\\ufeff", "\\U0000", "\\x00", "\\", "\\\\u0000"])
RAW = st.sampled_from(["\x00", "\x1f", "\x7f", "\u2028", "\U0001f600", "\ufffe", "é", "{",
                       "[", "1234567890123456", "null", "true"])
PLAIN = st.characters(blacklist_categories=("Cs",), blacklist_characters='"\\',
                      min_codepoint=0x20)
STRING_TEXT = st.lists(st.one_of(ESCAPES, RAW, *[PLAIN] * 8), max_size=8).map(
    lambda parts: '"' + "".join(parts) + '"')
KEY_TEXT = st.sampled_from(['"a"', '"b"', '"id"', '"\\u0061"', '""']) | STRING_TEXT
SCALAR_TEXT = st.sampled_from(["null", "true", "false", "nul", "True"]) | NUMBER_TEXT | \
    STRING_TEXT


def _array(items: list, ws: str) -> str:
    return "[" + ws + ("," + ws).join(items) + ws + "]"


def _object(members: list, ws: str) -> str:
    return "{" + ws + ("," + ws).join(f"{k}{ws}:{ws}{v}" for k, v in members) + ws + "}"


VALUE_TEXT = st.recursive(
    SCALAR_TEXT,
    lambda children: st.builds(_array, st.lists(children, max_size=5), WS)
    | st.builds(_object, st.lists(st.tuples(KEY_TEXT, children), max_size=5), WS),
    max_leaves=25)


def _nested(inner: str, levels: int, as_array: bool) -> str:
    return ("[" * levels + inner + "]" * levels if as_array
            else '{"n":' * levels + inner + "}" * levels)


DOCUMENT = st.one_of(
    st.builds(lambda members, ws: _object(members, ws),
              st.lists(st.tuples(KEY_TEXT, VALUE_TEXT), max_size=6), WS),
    VALUE_TEXT,
    st.builds(_nested, VALUE_TEXT, st.integers(0, 80), st.booleans()),
    st.builds(lambda value, ws: ws + json.dumps(value) + ws,
              st.recursive(st.none() | st.booleans() | st.integers() | st.text() | st.floats(),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(), c,
                                                                              max_size=4),
                           max_leaves=20), WS),
)
ENCODED = st.sampled_from(["utf-8", "str", "bom", "utf-16"])


def encoded(text: str, how: str) -> bytes | str | None:
    if how == "str":
        return text
    try:
        raw = text.encode("utf-16" if how == "utf-16" else "utf-8")
    except UnicodeEncodeError:
        return None
    return b"\xef\xbb\xbf" + raw if how == "bom" else raw


@settings(max_examples=600, deadline=None)
@given(DOCUMENT, ENCODED, st.sampled_from([MAX_DEPTH, 3, 5, 64, 100]))
@example('{"a": 1, "a": "\\u0000"}', "utf-8", 64)  # the last duplicate wins, in both
@example('{"a": "\\u0000", "a": 1}', "utf-8", 64)
@example('{"a": null, "a": 1, "b": 1e400}', "utf-8", 64)
@example('{"b": 1, "a": 2, "b": 3}', "str", 64)
@example('{"n": 18446744073709551616}', "utf-8", 64)  # orjson reads it as a float
@example('{"n": -9223372036854775809}', "utf-8", 64)
@example('{"n": 9007199254740992}', "utf-8", 64)
@example('{"n": 1e400}', "utf-8", 64)
@example('{"n": NaN}', "utf-8", 64)
@example('{"s": "\\ud800"}', "utf-8", 64)
@example('{"s": "\\udc00\\ud800"}', "str", 64)
@example('{"\\u0000": 1}', "utf-8", 64)
@example('{"s": "\\\\u0000"}', "utf-8", 64)  # an escaped backslash: a false alarm, walked
@example("[" * 64 + "]" * 64, "utf-8", 64)
@example("[" * 65 + "]" * 65, "utf-8", 64)
@example("[" * 3000 + "]" * 3000, "utf-8", 64)  # beyond both parsers' own limits
@example('{"a": "\ud800"}', "str", 64)  # a lone surrogate in text (a WebSocket frame)
@example('{"a": 1}', "bom", 64)
@example('{"a": 1}', "utf-16", 64)
@example('{"a": -0, "b": -0.0, "c": 1.0, "d": 1E2, "e": 1e-400}', "utf-8", 64)
def test_the_shortcut_agrees_with_json_loads_and_the_walk(text, how, max_depth):
    data = encoded(text, how)
    if data is not None:
        event(check(data, max_depth))  # --hypothesis-show-statistics: each path is taken


def test_an_ordinary_command_is_proven_without_a_walk():
    envelope = {"id": "b-1", "type": "work.submit", "groupId": "grp_1", "actor": "agent:a",
                "issuedAt": "2026-12-05T01:00:00Z", "sessionEpoch": 1, "membershipEpoch": 1,
                "body": {"contractRevision": 1, "artifacts": ["sha256:" + "ab" * 32],
                         "confidence": 0.8},
                "signature": {"alg": "Ed25519", "keyId": "k", "sig": "A" * 86}}
    assert check(json.dumps(envelope).encode(), MAX_DEPTH) == "proven"
    assert check(json.dumps({"op": "COMMAND", "command": envelope}), MAX_DEPTH) == "proven"


def test_what_the_shortcut_cannot_prove_is_walked_or_handed_back():
    assert check(b'{"a": "\\u0000"}', MAX_DEPTH) == "walked"
    assert check(b'{"a": [[[[1]]]]}', 3) == "walked"
    for hostile in (b'{"a": NaN}', b'{"a": 1e400}', b'{"a": 9007199254740992}',
                    b'{"a": 18446744073709551616}', b'{"a": "\\ud800"}', b"[1,]", b"",
                    b'\xef\xbb\xbf{"a": 1}', b'{"a": "\xff"}'):
        assert loads_in_domain(hostile, MAX_DEPTH) is None, hostile
