"""RFC 8785 canonical JSON, content hashes and Ed25519 signatures (PROTOCOL §1, §3)."""

import base64
import hashlib

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ZERO_HASH = "sha256:" + "0" * 64


def canonical(value) -> bytes:
    """The RFC 8785 (JCS) form of a JSON value, as UTF-8 bytes."""
    return rfc8785.dumps(value)


def sha256_hex(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def content_hash(value) -> str:
    """`sha256:<hex>` of a JSON value's canonical form."""
    return sha256_hex(canonical(value))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    if not isinstance(text, str):
        raise ValueError("expected a base64url string")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def without(document: dict, member: str) -> dict:
    return {key: value for key, value in document.items() if key != member}


def signing_bytes(document: dict) -> bytes:
    """What a signature covers: the canonical form of the object without `signature`."""
    return canonical(without(document, "signature"))


def sign(document: dict, private_key: Ed25519PrivateKey, key_id: str) -> dict:
    """A copy of `document` carrying its Ed25519 `signature` member."""
    sig = private_key.sign(signing_bytes(document))
    return {**without(document, "signature"),
            "signature": {"alg": "Ed25519", "keyId": key_id, "sig": b64url(sig)}}


def signature_key_id(document: dict) -> str | None:
    signature = document.get("signature")
    if isinstance(signature, dict) and isinstance(signature.get("keyId"), str):
        return signature["keyId"]
    return None


def verify(document: dict, public_key: Ed25519PublicKey) -> bool:
    """True when `document.signature` is a valid Ed25519 signature by `public_key`."""
    signature = document.get("signature")
    if not isinstance(signature, dict) or signature.get("alg") != "Ed25519":
        return False
    try:
        public_key.verify(b64url_decode(signature.get("sig")), signing_bytes(document))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def public_key_from_b64url(text: str) -> Ed25519PublicKey:
    raw = b64url_decode(text)
    if len(raw) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def public_key_b64url(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return b64url(raw)


def private_key_from_b64url(text: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(b64url_decode(text))


def private_key_b64url(key: Ed25519PrivateKey) -> str:
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    return b64url(raw)
