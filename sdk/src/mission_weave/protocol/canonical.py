"""RFC 8785 canonical JSON, content hashes and Ed25519 signatures (PROTOCOL §1, §3)."""

import base64
import hashlib
import math
import re
from functools import lru_cache
from typing import Any

import orjson
import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .json_types import JsonObject

ZERO_HASH = "sha256:" + "0" * 64


def canonical(value: Any) -> bytes:  # any JSON value
    """The RFC 8785 (JCS) form of a JSON value, as UTF-8 bytes.

    orjson (compiled) writes it for almost every document, about fifty times faster than
    the pure-Python rfc8785 package, which writes the few that orjson would get wrong
    (see _fast). tests/unit/test_canonical*.py check the two agree, and RFC 8785's own
    vectors."""
    fast = _fast(value)
    return fast if fast is not None else rfc8785.dumps(value)


# orjson with sorted keys writes JCS's bytes (same escapes: \b \t \n \f \r, lowercase
# \u00xx for the other controls, everything else raw, "/" and U+2028/2029 included) except
# in the cases below, each caught from its output, not by walking the value in Python:
# - integers beyond ±(2**53-1): OPT_STRICT_INTEGER makes orjson refuse them (so does JCS);
# - NaN and ±Infinity, which orjson writes as null, and types orjson writes that JSON has
#   no place for (UUID, Enum, datetime, tuple...): the bytes do not parse back to an equal
#   value;
# - floats that JavaScript writes differently: orjson keeps ".0" on whole numbers (56.0,
#   -0.0) and uses an exponent from 1e16 up and below 1e-5, JCS from 1e21 and below 1e-6;
#   orjson's other floats are the same shortest digits, written the same way. So output
#   with "e+", "e-" or a final ".0" in a number is handed over (_float_differs);
# - member names sorted: orjson by code point, JCS by UTF-16 code unit. The two orders
#   differ only between a character above U+FFFF (UTF-8 lead byte F0-F4) and one in
#   U+E000-U+FFFF (lead byte EE or EF), so only output holding both is handed over.
_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_EXPONENT = re.compile(rb"e[-+]")
_POINT_ZERO = re.compile(rb"\.0(?![0-9])")
_FEW = 4  # matches whose quotes _float_differs counts
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_ASTRAL = re.compile(rb"[\xf0-\xf4]")
_HIGH_BMP = re.compile(rb"[\xee\xef]")


def canonical_of_parsed(value: Any) -> bytes:
    """canonical() of a value made only of what a JSON parser gives (dict, list, str,
    int, float, bool, None; no NaN or Infinity), as mw_verify has from the log: the same
    bytes, without checking that they parse back to the value (a third of the cost)."""
    fast = _fast(value, round_trip=False)
    return fast if fast is not None else rfc8785.dumps(value)


def _fast(value: Any, round_trip: bool = True) -> bytes | None:
    """orjson's bytes when they are RFC 8785's, else None."""
    try:
        out = orjson.dumps(value, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: big integers, surrogates, non-str keys...
        return None
    if _float_differs(out):
        return None
    if not out.isascii() and _ASTRAL.search(out) and _HIGH_BMP.search(out):
        return None
    if round_trip and orjson.loads(out) != value:
        return None
    return out


def _float_differs(out: bytes) -> bool:
    """Whether orjson's `out` holds a float JCS writes otherwise. Each match of the two
    quick searches may be inside a string ("re-run", "v1.0"): it is a number only when
    an even number of quotes come before it. An escaped quote would upset that count,
    and counting for many matches would take time growing as the square of the length,
    so output with a backslash or more than a few matches is searched again, once,
    without its strings, where only numbers can match."""
    seen = 0
    for pattern in (_EXPONENT, _POINT_ZERO):
        for match in pattern.finditer(out):
            seen += 1
            if seen > _FEW or b"\\" in out:
                bare = _STRING.sub(b'""', out)  # left: numbers, literals, punctuation
                return _EXPONENT.search(bare) is not None or \
                    _POINT_ZERO.search(bare) is not None
            if out.count(b'"', 0, match.start()) % 2 == 0:
                return True
    return False


def sha256_hex(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:  # any JSON value
    """`sha256:<hex>` of a JSON value's canonical form."""
    return sha256_hex(canonical(value))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: object) -> bytes:
    """The bytes of base64url `text`; ValueError for anything else (it checks what a
    document says, so the value may be of any JSON type)."""
    if not isinstance(text, str):
        raise ValueError("expected a base64url string")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def without(document: JsonObject, member: str) -> JsonObject:
    return {key: value for key, value in document.items() if key != member}


def signing_bytes(document: JsonObject) -> bytes:
    """What a signature covers: the canonical form of the object without `signature`."""
    return canonical(without(document, "signature"))


def sign(document: JsonObject, private_key: Ed25519PrivateKey, key_id: str) -> JsonObject:
    """A copy of `document` carrying its Ed25519 `signature` member."""
    sig = private_key.sign(signing_bytes(document))
    return {**without(document, "signature"),
            "signature": {"alg": "Ed25519", "keyId": key_id, "sig": b64url(sig)}}


def signature_key_id(document: JsonObject) -> str | None:
    signature = document.get("signature")
    key_id = signature.get("keyId") if isinstance(signature, dict) else None
    return key_id if isinstance(key_id, str) else None


def verify(document: JsonObject, public_key: Ed25519PublicKey,
           signed: bytes | None = None) -> bool:
    """True when `document.signature` is a valid Ed25519 signature by `public_key`.
    `signed` may pass signing_bytes(document) when the caller already has them.
    Stricter than OpenSSL alone: the key must pass public_key_problem, and S must be
    below the group order (OpenSSL checks that too; here it does not depend on it)."""
    signature = document.get("signature")
    if not isinstance(signature, dict) or signature.get("alg") != "Ed25519":
        return False
    try:
        sig = b64url_decode(signature.get("sig"))
        if len(sig) != 64 or int.from_bytes(sig[32:], "little") >= ED25519_ORDER:
            return False
        if public_key_problem(_raw_public(public_key)) is not None:
            return False
        public_key.verify(sig, signed if signed is not None else signing_bytes(document))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def public_key_from_b64url(text: str) -> Ed25519PublicKey:
    """The Ed25519 public key written as base64url (raw 32 bytes, no padding); ValueError
    saying what is wrong when it is not one the server accepts (public_key_problem)."""
    if not isinstance(text, str):
        raise ValueError("a public key is a base64url string")
    return _public_key(text)


@lru_cache(maxsize=4096)  # every command verifies with a stored key: parse each once
def _public_key(text: str) -> Ed25519PublicKey:
    try:
        raw = b64url_decode(text)
    except ValueError:
        raise ValueError("a public key is base64url (A-Z a-z 0-9 - _, no padding)") from None
    problem = public_key_problem(raw)
    if problem is not None:
        raise ValueError(problem)
    if b64url(raw) != text:
        raise ValueError("the public key is not written as canonical base64url (no '=' "
                         "padding, no other characters, unused low bits zero)")
    return Ed25519PublicKey.from_public_bytes(raw)


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_b64url(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return b64url(_raw_public(public))


def private_key_from_b64url(text: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(b64url_decode(text))


def private_key_b64url(key: Ed25519PrivateKey) -> str:
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    return b64url(raw)


# --- Ed25519 public keys: what OpenSSL lets through -----------------------------------
# OpenSSL refuses a signature whose S is not below the group order, but takes any 32 bytes
# that decode to a curve point as a public key. Two kinds are refused here, at
# registration and at every verification (the checks libsodium's verify makes):
# - a point of small order (8 points; with one, R = identity and S = 0 "verifies" many
#   messages, so a signature proves nothing about who made it);
# - a non-canonical encoding (y not reduced mod p, or x = 0 with the sign bit set): a
#   second spelling of a point, so one key could be registered twice under two ids.
# RFC 8032 §5.1.3 decoding, in affine coordinates: the point is checked once per key.

_P = 2**255 - 19
ED25519_ORDER = 2**252 + 27742317777372353535851937790883648493  # L, the base point's order
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


@lru_cache(maxsize=4096)
def public_key_problem(raw: bytes) -> str | None:
    """Why `raw` is not an Ed25519 public key the server accepts, or None."""
    if len(raw) != 32:
        return f"an Ed25519 public key is 32 bytes; this one is {len(raw)}"
    y, sign = int.from_bytes(raw, "little") & ((1 << 255) - 1), raw[31] >> 7
    if y >= _P:
        return ("the public key is not a canonical point encoding (its y is not reduced "
                "modulo 2^255-19)")
    x = _recover_x(y)
    if x is None:
        return "the public key is not a point on the Ed25519 curve"
    if x == 0 and sign:
        return "the public key is not a canonical point encoding (x is 0, the sign bit is 1)"
    if _times_8_is_identity(x if x % 2 == sign else _P - x, y):
        return ("the public key is a point of small order, with which signatures prove "
                "nothing; generate a new key")
    return None


def _recover_x(y: int) -> int | None:
    u, v = (y * y - 1) % _P, (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P
    if (v * x * x - u) % _P == 0:
        return x
    if (v * x * x + u) % _P == 0:
        return x * _SQRT_M1 % _P
    return None


def _times_8_is_identity(x: int, y: int) -> bool:
    """[8](x, y) is the neutral point: three doublings in projective coordinates, with
    RFC 8032 §5.1.4's formula (no inversions; valid for every point of the curve)."""
    z = 1
    for _ in range(3):
        a, b, c = x * x, y * y, 2 * z * z
        h, g = a + b, a - b
        e, f = h - (x + y) ** 2, c + g
        x, y, z = e * f % _P, g * h % _P, f * g % _P
    return x == 0 and y == z


# --- the JSON domain: what RFC 8785 can encode and PostgreSQL can store ------------------

SAFE_INTEGER = 2**53 - 1  # RFC 8785 / I-JSON: integers beyond this have no canonical form
MAX_DEPTH = 64  # objects and arrays nested deeper than this are refused


def domain_problem(value: Any, max_depth: int = MAX_DEPTH) -> tuple[str, str] | None:
    """Where a parsed JSON value leaves the domain the server can sign, hash and store,
    as `(path, reason)`, or None. Outside it: integers beyond ±(2**53-1), non-finite
    numbers, text with U+0000 or lone surrogates, nesting deeper than `max_depth`.
    Iterative, so a hostile depth cannot exhaust the stack."""
    stack = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, str):
            problem = _text_problem(item)
        elif isinstance(item, int):
            problem = None if -SAFE_INTEGER <= item <= SAFE_INTEGER else \
                "the integer is outside ±(2**53-1), which RFC 8785 cannot encode"
        elif isinstance(item, float):
            problem = None if math.isfinite(item) else "the number is not finite"
        elif isinstance(item, (dict, list)):
            problem = f"nested deeper than {max_depth} levels" if depth >= max_depth else None
            if problem is None and isinstance(item, dict):
                for key, child in item.items():
                    child_path = f"{path}.{_printable(key)}" if path else _printable(key)
                    key_problem = _text_problem(key)
                    if key_problem:
                        return child_path, f"the member name: {key_problem}"
                    stack.append((child, child_path, depth + 1))
            elif problem is None:
                stack.extend((child, f"{path}[{index}]", depth + 1)
                             for index, child in enumerate(item))
        else:
            problem = f"a {type(item).__name__} is not a JSON value"
        if problem:
            return path or "(root)", problem
    return None


# The common case compiled: orjson parses the document, and a look at its bytes proves it
# in the domain without a walk. Each shortcut is taken only where it cannot change what
# json.loads and domain_problem would decide; anything else is handed back to them.
_DIGITS_ONLY = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_DIGITS = b"0" * 16  # in the bytes seen through _DIGITS_ONLY (a regex is 10x slower)


def loads_in_domain(data: bytes | str, max_depth: int = MAX_DEPTH) -> tuple[Any, bool] | None:
    """orjson's parse of the JSON text `data`, where it is the value json.loads(data)
    gives, as `(value, proven)`: `proven` is True when the bytes show the value within the
    domain, so that domain_problem(value, max_depth) would be None without walking it
    (False: walk it). None when orjson cannot stand in for json.loads on `data`: parse it
    with json.loads and refuse as before.

    Why the two parses agree, and the proof holds (tests/unit/test_domain_fast.py):
    - orjson refuses what json.loads would take but the domain refuses: NaN, ±Infinity,
      numbers that overflow to infinity, lone surrogates (escaped, or in `str` input),
      and refuses no valid UTF-8 JSON that json.loads takes without those;
    - an integer beyond ±(2**53-1) has 16 digits or more, and so does one that orjson
      would read as a float (beyond 64 bits): a run of 16 digits anywhere (a string's
      too) is handed back. Shorter integers are exact in both, and both read a number
      with a fraction or an exponent as the nearest double;
    - duplicate member names: both keep the last value, at the first name's place;
    - U+0000 can only be written `\u0000` (raw control characters are not JSON);
    - nesting cannot be deeper than the count of `{` and `[` (strings' included)."""
    if isinstance(data, str):
        try:
            data = data.encode()
        except UnicodeEncodeError:  # a lone surrogate
            return None
    if _LONG_DIGITS in data.translate(_DIGITS_ONLY):
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    proven = b"\\u0000" not in data and data.count(b"{") + data.count(b"[") <= max_depth
    return value, proven


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "the text contains U+0000"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "the text contains a lone surrogate, which is not Unicode text"
    return None


def _printable(key: str) -> str:
    return key.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")
