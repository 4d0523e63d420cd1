"""Ed25519 edge cases in sdk/src/mission_weave/protocol/canonical.py: what OpenSSL (through the
`cryptography` package) lets through and the protocol module refuses, at parsing
(public_key_from_b64url, what registration uses) and at verification (verify).

- S not below the group order L: OpenSSL refuses it already; verify refuses it before
  OpenSSL is asked, so that it does not depend on the library's version.
- Small-order public keys: OpenSSL accepts them, and with one a forged signature
  (R = the neutral point, S = 0) verifies; the tests show both.
- Non-canonical point encodings (y >= p; x = 0 with the sign bit set): OpenSSL loads them.
- Keys of 31 or 33 bytes, and keys not written as canonical base64url."""

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from mission_weave.protocol import canonical
from mission_weave.protocol.canonical import (
    ED25519_ORDER,
    b64url,
    public_key_from_b64url,
    public_key_problem,
    sign,
    signing_bytes,
    verify,
)

P = 2**255 - 19
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
# The 8 points of small order, canonically encoded (libsodium's blocklist in
# crypto_sign/ed25519/ref10/open.c, with both signs of x where x is not 0).
SMALL_ORDER = {
    "neutral (order 1)": "01" + "00" * 31,
    "order 2": "ec" + "ff" * 30 + "7f",
    "order 4": "00" * 32,
    "order 4, other x": "00" * 31 + "80",
    "order 8": "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "order 8, other x": "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
    "order 8, other y": "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "order 8, other y and x": "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
}
# Second spellings of points: y not reduced mod p, or x = 0 with the sign bit set.
NON_CANONICAL = {
    "y = p (0)": "ed" + "ff" * 30 + "7f",
    "y = p + 1 (1)": "ee" + "ff" * 30 + "7f",
    "y = p, sign 1": "ed" + "ff" * 31,
    "y = 2**255 - 1": "ff" * 32,
    "neutral with sign 1": "01" + "00" * 30 + "80",
    "order 2 with sign 1": "ec" + "ff" * 31,
}
# R = the neutral point, S = 0: with the neutral key, [S]B = R + [k]A holds for every
# message; with other small-order keys for some messages.
FORGED = bytes.fromhex("01" + "00" * 31) + bytes(32)
DOCUMENT = {"agentId": "w1", "keyId": "w1#1", "nonce": "n" * 16,
            "issuedAt": "2026-11-29T08:00:00Z"}


def forged(document: dict) -> dict:
    return {**document, "signature": {"alg": "Ed25519", "keyId": "w1#1", "sig": b64url(FORGED)}}


def with_s(document: dict, s: int) -> dict:
    raw = canonical.b64url_decode(document["signature"]["sig"])
    sig = raw[:32] + s.to_bytes(32, "little")
    return {**document, "signature": {**document["signature"], "sig": b64url(sig)}}


# --- S must be below L --------------------------------------------------------------------

def test_a_signature_whose_s_is_not_reduced_is_refused():
    key = Ed25519PrivateKey.generate()
    signed = sign(DOCUMENT, key, "w1#1")
    s = int.from_bytes(canonical.b64url_decode(signed["signature"]["sig"])[32:], "little")
    assert s + ED25519_ORDER < 2**256  # S + L still fits the 32 bytes (S < 2**253)

    malleated = with_s(signed, s + ED25519_ORDER)

    assert verify(signed, key.public_key())
    assert not verify(malleated, key.public_key())
    with pytest.raises(InvalidSignature):  # OpenSSL refuses it too, today
        key.public_key().verify(canonical.b64url_decode(malleated["signature"]["sig"]),
                                signing_bytes(malleated))


def test_an_s_of_exactly_l_is_refused():
    key = Ed25519PrivateKey.generate()
    assert not verify(with_s(sign(DOCUMENT, key, "w1#1"), ED25519_ORDER), key.public_key())


@pytest.mark.parametrize("length", [0, 63, 65])
def test_a_signature_of_the_wrong_length_is_refused(length):
    key = Ed25519PrivateKey.generate()
    signed = sign(DOCUMENT, key, "w1#1")
    raw = (canonical.b64url_decode(signed["signature"]["sig"]) * 2)[:length]
    assert not verify({**signed, "signature": {**signed["signature"], "sig": b64url(raw)}},
                      key.public_key())


# --- small-order public keys ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SMALL_ORDER))
def test_a_small_order_key_is_refused_at_parsing(name):
    raw = bytes.fromhex(SMALL_ORDER[name])

    assert "small order" in public_key_problem(raw)
    with pytest.raises(ValueError, match="small order"):
        public_key_from_b64url(b64url(raw))
    Ed25519PublicKey.from_public_bytes(raw)  # OpenSSL loads it without complaint


@pytest.mark.parametrize("name", sorted(SMALL_ORDER))
def test_a_small_order_key_verifies_nothing(name):
    key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(SMALL_ORDER[name]))
    assert not verify(forged(DOCUMENT), key)


def test_openssl_alone_accepts_a_forgery_under_the_neutral_key():
    """Why the check exists: nobody holds a private key for it, yet this verifies."""
    neutral = Ed25519PublicKey.from_public_bytes(bytes.fromhex(SMALL_ORDER["neutral (order 1)"]))
    document = forged(DOCUMENT)

    neutral.verify(FORGED, signing_bytes(document))  # no InvalidSignature: OpenSSL accepts
    assert not verify(document, neutral)


# --- non-canonical encodings, points off the curve ----------------------------------------

@pytest.mark.parametrize("name", sorted(NON_CANONICAL))
def test_a_non_canonical_encoding_is_refused(name):
    raw = bytes.fromhex(NON_CANONICAL[name])

    assert "not a canonical point encoding" in public_key_problem(raw)
    with pytest.raises(ValueError, match="not a canonical point encoding"):
        public_key_from_b64url(b64url(raw))


def test_a_real_point_spelt_with_y_plus_p_is_refused_and_its_canonical_spelling_is_not():
    """The y < 19 whose point has large order: y + p still fits 255 bits."""
    spelt = []
    for y in range(2, 19):
        canonical_raw = y.to_bytes(32, "little")
        if public_key_problem(canonical_raw) is None:
            spelt.append(y)
            assert "not a canonical point" in public_key_problem((y + P).to_bytes(32, "little"))
    assert spelt, "no y below 19 is a point of large order"


def test_a_y_off_the_curve_is_refused():
    off = next(y for y in range(2, 100)
               if public_key_problem(y.to_bytes(32, "little")) == "the public key is not a "
               "point on the Ed25519 curve")
    with pytest.raises(ValueError, match="not a point on the Ed25519 curve"):
        public_key_from_b64url(b64url(off.to_bytes(32, "little")))


# --- length and spelling --------------------------------------------------------------------

@pytest.mark.parametrize("length", [31, 33, 0, 64])
def test_a_key_of_the_wrong_length_is_refused_saying_so(length):
    with pytest.raises(ValueError) as raised:
        public_key_from_b64url(b64url(bytes(range(length))))
    assert str(raised.value) == f"an Ed25519 public key is 32 bytes; this one is {length}"


def test_a_key_must_be_canonical_base64url():
    text = canonical.public_key_b64url(Ed25519PrivateKey.generate())
    # The last character carries two unused bits: flipping one spells the same 32 bytes.
    other_low_bits = text[:-1] + ALPHABET[ALPHABET.index(text[-1]) ^ 1]
    assert canonical.b64url_decode(other_low_bits) == canonical.b64url_decode(text)

    for spelling in (text + "=", other_low_bits, text[:20] + "!" + text[20:]):
        with pytest.raises(ValueError):
            public_key_from_b64url(spelling)
    assert public_key_from_b64url(text) is not None
    with pytest.raises(ValueError, match="base64url string"):
        public_key_from_b64url(None)


# --- ordinary keys pass ----------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_every_generated_key_passes_and_verifies_its_signatures(seed):
    key = Ed25519PrivateKey.from_private_bytes(seed)
    text = canonical.public_key_b64url(key)

    assert public_key_problem(canonical.b64url_decode(text)) is None
    assert verify(sign(DOCUMENT, key, "w1#1"), public_key_from_b64url(text))
