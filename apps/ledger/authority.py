"""The Group Authority's own Ed25519 key: signs snapshots and the server's manifests."""

from functools import cache

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings

from mission_weave.protocol import canonical

KEY_ID = "authority#1"


@cache
def private_key() -> Ed25519PrivateKey:
    """From MW_AUTHORITY_KEY, else the key file (made on first use, for development)."""
    if settings.MW_AUTHORITY_KEY:
        return canonical.private_key_from_b64url(settings.MW_AUTHORITY_KEY)
    path = settings.MW_AUTHORITY_KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(canonical.private_key_b64url(Ed25519PrivateKey.generate()))
        path.chmod(0o600)
    return canonical.private_key_from_b64url(path.read_text().strip())


def public_key() -> dict:
    return {"keyId": KEY_ID, "publicKey": canonical.public_key_b64url(private_key())}


def sign(document: dict) -> dict:
    return canonical.sign(document, private_key(), KEY_ID)
