"""An Agent's public key read from a file, for `mw_register_agent --public-key-file`.

The file holds either the key itself (raw 32 bytes in base64url, surrounding whitespace
ignored), or a JSON key file such as the SDK reads (sdk/src/mission_weave/sdk/keys.py) and
`mw_demo` writes, `{agentId, keyId, groupId, privateKey}`, the private key being the raw
Ed25519 seed in base64url. A JSON file's `publicKey` is taken if present; otherwise the
public key is derived from `privateKey`. A file with both must have them agree."""

import json
from pathlib import Path

from mission_weave.protocol import canonical
from mission_weave.protocol.errors import ProtocolError


def _refuse(path, problem: str) -> ProtocolError:
    return ProtocolError("VALIDATION_ERROR", f"public key file {path}: {problem}")


def public_key_from_file(path) -> str:
    """The base64url public key the file at `path` holds or implies."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise _refuse(path, f"cannot be read ({error})") from None
    if not text:
        raise _refuse(path, "is empty; it should hold the base64url public key, or a JSON "
                            "key file with a privateKey or publicKey member")
    # A base64url key never starts with "{", so only an object is read as JSON.
    if not text.startswith("{"):
        if any(ch.isspace() for ch in text):
            raise _refuse(path, "holds more than one word; it should hold the base64url "
                                "public key alone")
        return text
    try:
        saved = json.loads(text)
    except ValueError as error:
        raise _refuse(path, f"is not valid JSON ({error})") from None
    if not isinstance(saved, dict):
        raise _refuse(path, "is not a JSON object")
    # Each member must be a string where present (checked first); then one must be there.
    public, private = _key_member(saved, "publicKey", path), _key_member(saved, "privateKey", path)
    if private is None:
        if public is None:
            raise _refuse(path, "a JSON key file needs a publicKey or a privateKey member "
                                f"(it has {', '.join(sorted(saved)) or 'none'})")
        return public
    try:
        derived = canonical.public_key_b64url(canonical.private_key_from_b64url(private))
    except ValueError as error:
        raise _refuse(path, f"privateKey is not a raw 32-byte Ed25519 key in base64url "
                            f"({error})") from None
    if public is not None and _raw(public, path) != _raw(derived, path):
        raise _refuse(path, "publicKey is not the public half of privateKey")
    return public if public is not None else derived


def _key_member(saved: dict, name: str, path) -> str | None:
    value = saved.get(name)
    if value is not None and not isinstance(value, str):
        raise _refuse(path, f"{name} must be a base64url string")
    return value


def _raw(key: str, path) -> bytes:
    try:
        return canonical.b64url_decode(key)
    except ValueError as error:
        raise _refuse(path, f"publicKey is not base64url ({error})") from None
