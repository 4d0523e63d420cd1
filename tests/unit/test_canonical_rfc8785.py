"""canonical() against RFC 8785's published vectors, not against the rfc8785 package
(tests/unit/test_canonical.py uses the package as the oracle; these would catch the two
agreeing on a wrong answer): Appendix B's number serialization samples, the §3.2.2
example, the §3.2.3 sorting example, and the reference implementation's test data
(github.com/cyberphone/json-canonicalization, testdata/input and testdata/outhex)."""

import json
import struct

import pytest

from mission_weave.protocol.canonical import _fast, canonical

# RFC 8785 Appendix B: IEEE-754 binary64 bit pattern -> its JCS serialization.
APPENDIX_B = [
    ("0000000000000000", "0"),  # zero
    ("8000000000000000", "0"),  # minus zero
    ("0000000000000001", "5e-324"),  # smallest positive
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),  # largest
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),  # 2**53
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),  # ~2**68
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),  # where exponent notation begins
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),  # where it ends below 1
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),  # round to even
]
NOT_REPRESENTABLE = ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"]  # NaN, ±Inf

# The reference implementation's testdata: input JSON text -> the canonical bytes (hex).
REFERENCE = {
    'arrays': (
        '[ 56, { "d": true, "10": null, "1": [ ] } ]',
        '5b35362c7b2231223a5b5d2c223130223a6e756c6c2c2264223a747275657d5d'),
    'french': (
        '{ "peach": "This sorting order", "péché": "is wrong according to'
        ' French", "pêche": "but canonicalization MUST", "sin":   "ignore'
        ' locale" }',
        '7b227065616368223a225468697320736f7274696e67206f72646572222c2270c3a96368c3a9223a'
        '2269732077726f6e67206163636f7264696e6720746f204672656e6368222c2270c3aa636865223a'
        '226275742063616e6f6e6963616c697a6174696f6e204d555354222c2273696e223a2269676e6f72'
        '65206c6f63616c65227d'),
    'structures': (
        '{ "1": {"f": {"f": "hi","F": 5} ,"\\n": 56.0}, "10": { }, "": "em'
        'pty", "a": { }, "111": [ {"e": "yes","E": "no" } ], "A": { } }',
        '7b22223a22656d707479222c2231223a7b225c6e223a35362c2266223a7b2246223a352c2266223a'
        '226869227d7d2c223130223a7b7d2c22313131223a5b7b2245223a226e6f222c2265223a22796573'
        '227d5d2c2241223a7b7d2c2261223a7b7d7d'),
    # no Unicode normalization
    'unicode': (
        '{ "Unnormalized Unicode":"A\\u030a" }',
        '7b22556e6e6f726d616c697a656420556e69636f6465223a2241cc8a227d'),
    # RFC 8785 §3.2.2's example
    'values': (
        '{ "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.0000000000'
        '00000000000000001], "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022'
        '\\u005c\\\\\\"\\/", "literals": [null, true, false] }',
        '7b226c69746572616c73223a5b6e756c6c2c747275652c66616c73655d2c226e756d62657273223a'
        '5b3333333333333333332e333333333333332c31652b33302c342e352c302e3030322c31652d3237'
        '5d2c22737472696e67223a22e282ac245c75303030665c6e4127425c225c5c5c5c5c222f227d'),
    # RFC 8785 §3.2.3's sorting example, with a few more names
    'weird': (
        '{ "\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\u000a": "New'
        'line", "1": "One", "\\u0080": "Control\\u007f", "\\ud83d\\ude02": "S'
        'miley", "\\u00f6": "Latin Small Letter O With Diaeresis", "\\ufb33'
        '": "Hebrew Letter Dalet With Dagesh", "</script>": "Browser Chal'
        'lenge" }',
        '7b225c6e223a224e65776c696e65222c225c72223a2243617272696167652052657475726e222c22'
        '31223a224f6e65222c223c2f7363726970743e223a2242726f77736572204368616c6c656e676522'
        '2c22c280223a22436f6e74726f6c7f222c22c3b6223a224c6174696e20536d616c6c204c65747465'
        '72204f205769746820446961657265736973222c22e282ac223a224575726f205369676e222c22f0'
        '9f9882223a22536d696c6579222c22efacb3223a22486562726577204c65747465722044616c6574'
        '205769746820446167657368227d'),
}


def ieee(bits: str) -> float:
    return struct.unpack(">d", bytes.fromhex(bits))[0]


@pytest.mark.parametrize("bits,expected", APPENDIX_B)
def test_appendix_b_numbers(bits, expected):
    assert canonical(ieee(bits)) == expected.encode()
    assert canonical([ieee(bits)]) == f"[{expected}]".encode()


@pytest.mark.parametrize("bits", NOT_REPRESENTABLE)
def test_nan_and_infinity_have_no_canonical_form(bits):
    with pytest.raises(ValueError):
        canonical({"n": ieee(bits)})


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_the_reference_test_data(name):
    text, expected = REFERENCE[name]
    assert canonical(json.loads(text)) == bytes.fromhex(expected)


def test_the_vectors_cover_both_of_canonicals_paths():
    """canonical() writes most documents with orjson and the rest with rfc8785: the
    vectors go through both, and orjson's bytes, where it writes them, are the vectors'."""
    fast = {name for name, (text, _) in REFERENCE.items() if _fast(json.loads(text))}
    assert fast == {"arrays", "french", "unicode"}
    for name in fast:
        text, expected = REFERENCE[name]
        assert _fast(json.loads(text)) == bytes.fromhex(expected)
    fast_numbers = [expected for bits, expected in APPENDIX_B if _fast(ieee(bits))]
    assert fast_numbers and len(fast_numbers) < len(APPENDIX_B)


def test_member_names_sort_by_utf16_code_units_not_code_points():
    # U+1F600 is above U+FB33 as a code point, but its first UTF-16 unit, 0xD83D, is below.
    value = {"\ufb33": 1, "\U0001f600": 2, "\u00e9": 3, "z": 4}
    assert canonical(value) == '{"z":4,"\u00e9":3,"\U0001f600":2,"\ufb33":1}'.encode()
    assert sorted(value) != ["z", "\u00e9", "\U0001f600", "\ufb33"]  # code point order differs


def test_integers_at_the_edge_of_the_safe_range():
    assert canonical(2**53 - 1) == b"9007199254740991"
    assert canonical(-(2**53 - 1)) == b"-9007199254740991"
    assert canonical(-0) == b"0"
    for outside in (2**53, -(2**53), 10**21):
        with pytest.raises(ValueError):
            canonical({"n": outside})


def test_escapes_are_the_short_ones_and_lowercase_hex():
    value = {"s": "\b\f\n\r\t\"\\/\u0000\u001f\u007f\u2028"}
    assert canonical(value) == b'{"s":"\\b\\f\\n\\r\\t\\"\\\\/\\u0000\\u001f\x7f\xe2\x80\xa8"}'
