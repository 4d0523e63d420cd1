"""The Group Authority's Ed25519 keys. The current key signs snapshots; retired keys are
kept, their public halves only, so that what they signed still verifies. A signature
names its key by `keyId`, and GET /api/v1/authority lists every key.

Where they come from (docs/operations.md, "Key rotation"):
- with MW_AUTHORITY_KEY (the current seed): its id is MW_AUTHORITY_KEY_ID (default
  authority#1), and MW_AUTHORITY_RETIRED_KEYS lists the retired keys, comma separated,
  each `authority#<n>=<publicKey>` with an optional `@<retiredAt>`;
- without it, key files: MW_AUTHORITY_KEY_FILE holds authority#1's seed (made on first
  use) and `<file>.<n>` authority#n's (made by mw_rotate_authority_key). The highest
  number is current; a key was retired when its successor's file was written.
  MW_AUTHORITY_RETIRED_KEYS is read here too.

Key ids are `authority#<n>`, numbered by rotation like agents' keys and never reused, so
an id names one key for good, and the first key keeps the authority#1 that snapshots
signed before rotation existed carry. Retired entries take public keys, never seeds: a
seed and a public key are both 32 bytes of base64url and cannot be told apart, and a
retired seed has nothing left to sign."""

import os
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from mission_weave.protocol import canonical
from mission_weave.protocol.timefmt import format_time, parse_time

FIRST_KEY_ID = "authority#1"
_KEY_ID = re.compile(r"authority#([1-9][0-9]{0,8})")


@dataclass(frozen=True)
class Key:
    key_id: str
    public_key: str  # raw 32 bytes, base64url
    retired_at: str | None = None  # RFC 3339, when known; None for the current key
    private: Ed25519PrivateKey | None = field(default=None, repr=False, compare=False)

    @property
    def number(self) -> int:
        return int(self.key_id.removeprefix("authority#"))  # checked against _KEY_ID when read

    @property
    def signer(self) -> Ed25519PrivateKey:
        if self.private is None:
            raise RuntimeError(f"{self.key_id} is retired: only its public key is held")
        return self.private

    @property
    def verifier(self) -> Ed25519PublicKey:
        return canonical.public_key_from_b64url(self.public_key)

    def listing(self) -> dict:
        entry = {"keyId": self.key_id, "publicKey": self.public_key,
                 "current": self.private is not None}
        if self.retired_at is not None:
            entry["retiredAt"] = self.retired_at
        return entry


@dataclass(frozen=True)
class Keyring:
    current: Key
    retired: tuple[Key, ...]  # newest first

    @property
    def keys(self) -> tuple[Key, ...]:
        return (self.current, *self.retired)

    def get(self, key_id) -> Key | None:
        return next((key for key in self.keys if key.key_id == key_id), None)

    @property
    def next_number(self) -> int:
        return max(key.number for key in self.keys) + 1


# --- what the rest of the server calls ----------------------------------------------------

def sign(document: dict) -> dict:
    """A copy of `document` signed with the current key."""
    current = keyring().current
    return canonical.sign(document, current.signer, current.key_id)


def verify(document: dict) -> bool:
    """True when `document` carries a valid signature by one of the authority's keys,
    current or retired, picked by its keyId."""
    key = keyring().get(canonical.signature_key_id(document))
    return key is not None and canonical.verify(document, key.verifier)


def listing() -> dict:
    """GET /api/v1/authority: `{keys: [{keyId, publicKey, current, retiredAt?}]}`, the
    current key first."""
    return {"keys": [key.listing() for key in keyring().keys]}


def private_key() -> Ed25519PrivateKey:
    """The current signing key."""
    return keyring().current.signer


def keyring() -> Keyring:
    """The configured keys, read again whenever the settings or the key files change,
    so a rotation in the key-file case needs no restart. ImproperlyConfigured names
    the variable that is wrong."""
    retired = settings.MW_AUTHORITY_RETIRED_KEYS or ""
    if settings.MW_AUTHORITY_KEY:
        return _from_environment(settings.MW_AUTHORITY_KEY,
                                 settings.MW_AUTHORITY_KEY_ID or FIRST_KEY_ID, retired)
    if settings.MW_AUTHORITY_KEY_ID:
        raise ImproperlyConfigured("MW_AUTHORITY_KEY_ID goes with MW_AUTHORITY_KEY; the key "
                                   "files number themselves (MW_AUTHORITY_KEY_FILE.<n>)")
    path = Path(settings.MW_AUTHORITY_KEY_FILE)
    files = key_files(path)
    if not files:
        try:
            _write_new(path, Ed25519PrivateKey.generate())
        except FileExistsError:
            pass  # another process made the first key at the same moment: use theirs
        files = key_files(path)
    state = tuple((number, str(file), file.stat().st_mtime_ns) for number, file in files)
    return _from_files(state, retired)


# --- configuration --------------------------------------------------------------------------

def from_environment(seed: str, key_id: str, retired: str) -> Keyring:
    """The keyring the three variables describe; ValueError naming the one that is wrong.
    Also what settings_production checks at start-up."""
    try:
        private = canonical.private_key_from_b64url(seed)
    except (ValueError, TypeError):
        raise ValueError("MW_AUTHORITY_KEY must be a base64url-encoded 32-byte seed") from None
    if not _KEY_ID.fullmatch(key_id or ""):
        raise ValueError(f"MW_AUTHORITY_KEY_ID must be authority#<n>, n from 1; got {key_id!r}")
    current = Key(key_id, canonical.public_key_b64url(private), private=private)
    return _checked(current, parse_retired(retired))


def parse_retired(text: str) -> list[Key]:
    """MW_AUTHORITY_RETIRED_KEYS: `authority#<n>=<publicKey>[@<retiredAt>]`, comma
    separated; ValueError saying which entry is wrong and how."""
    keys = []
    for entry in (part.strip() for part in (text or "").split(",")):
        if not entry:
            continue
        key_id, equals, rest = entry.partition("=")
        public, _, retired_at = rest.partition("@")
        where = f"MW_AUTHORITY_RETIRED_KEYS entry {entry[:60]!r}"
        if not equals or not _KEY_ID.fullmatch(key_id.strip()):
            raise ValueError(f"{where}: write authority#<n>=<publicKey>[@<retiredAt>]")
        try:
            canonical.public_key_from_b64url(public.strip())
        except ValueError as error:
            raise ValueError(f"{where}: {error} (a retired entry takes the public key, "
                             "not the seed)") from None
        if retired_at:
            try:
                retired_at = format_time(parse_time(retired_at.strip()))
            except ValueError as error:
                raise ValueError(f"{where}: retiredAt: {error}") from None
        keys.append(Key(key_id.strip(), public.strip(), retired_at or None))
    return keys


def retired_setting(keys) -> str:
    """The MW_AUTHORITY_RETIRED_KEYS value listing `keys`."""
    return ",".join(f"{key.key_id}={key.public_key}"
                    + (f"@{key.retired_at}" if key.retired_at else "") for key in keys)


def _checked(current: Key, retired: list[Key]) -> Keyring:
    """Ids and public keys distinct; the current key numbered above every retired one,
    so that a rotation that forgot MW_AUTHORITY_KEY_ID is refused, not signed under an
    old key's name."""
    seen_ids, seen_keys = {current.key_id}, {current.public_key}
    for key in retired:
        if key.key_id in seen_ids:
            raise ValueError(f"the authority key id {key.key_id} is given twice; each key "
                             "keeps its own number")
        if key.public_key in seen_keys:
            raise ValueError(f"{key.key_id}'s public key is listed twice (as the current key "
                             "or another retired one)")
        if key.number > current.number:
            raise ValueError(f"retired key {key.key_id} is numbered above the current "
                             f"{current.key_id}: a new key takes the next number")
        seen_ids.add(key.key_id)
        seen_keys.add(key.public_key)
    return Keyring(current, tuple(sorted(retired, key=lambda key: -key.number)))


@lru_cache(maxsize=16)
def _from_environment(seed: str, key_id: str, retired: str) -> Keyring:
    try:
        return from_environment(seed, key_id, retired)
    except ValueError as error:
        raise ImproperlyConfigured(str(error)) from None


@lru_cache(maxsize=16)
def _from_files(state: tuple, retired: str) -> Keyring:
    keys = []
    for index, (number, file, _mtime) in enumerate(state):
        try:
            private = canonical.private_key_from_b64url(Path(file).read_text().strip())
        except (OSError, ValueError) as error:
            raise ImproperlyConfigured(f"authority key file {file}: not a base64url 32-byte "
                                       f"seed ({error})") from None
        successor = state[index + 1] if index + 1 < len(state) else None
        retired_at = None if successor is None else format_time(
            datetime.fromtimestamp(successor[2] / 1e9, UTC).replace(microsecond=0))
        keys.append(Key(f"authority#{number}", canonical.public_key_b64url(private),
                        retired_at, private if successor is None else None))
    try:
        return _checked(keys[-1], [*keys[:-1], *parse_retired(retired)])
    except ValueError as error:
        raise ImproperlyConfigured(str(error)) from None


# --- key files --------------------------------------------------------------------------------

def key_files(path: Path) -> list[tuple[int, Path]]:
    """(number, file) of the key files, by number: `path` is 1, `path.<n>` is n."""
    files = [(1, path)] if path.exists() else []
    if path.parent.is_dir():
        for file in path.parent.iterdir():
            suffix = file.name[len(path.name) + 1:]
            if (file.name.startswith(path.name + ".") and suffix.isdigit()
                    and not suffix.startswith("0") and int(suffix) > 1):
                files.append((int(suffix), file))
    return sorted(files)


def key_file(path: Path, number: int) -> Path:
    return path if number == 1 else path.with_name(f"{path.name}.{number}")


def rotate_key_file() -> Key:
    """The key-file case's rotation: a new seed in the next numbered file, which is the
    current key from then on. FileExistsError if another rotation took that number."""
    ring = keyring()
    path = Path(settings.MW_AUTHORITY_KEY_FILE)
    _write_new(key_file(path, ring.next_number), Ed25519PrivateKey.generate())
    return keyring().current


def _write_new(path: Path, key: Ed25519PrivateKey) -> None:
    """Write the seed to a new file, readable by its owner only, whole or not at all:
    written beside it, then linked into place, which fails if the name is taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f"{path.name}.new-{secrets.token_hex(4)}")
    descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(canonical.private_key_b64url(key) + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.link(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)
