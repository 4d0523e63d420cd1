import os
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

from apps.ledger import signing_keys
from apps.ledger.operator import OperatorCommand
from mission_weave.protocol import canonical
from mission_weave.protocol.timefmt import format_time


class Command(OperatorCommand):
    help = ("Rotate the Group Authority's signing key (docs/operations.md, Key rotation). "
            "With key files (MW_AUTHORITY_KEY unset): writes the next numbered key file, "
            "which signs from then on; the old keys stay listed for verifying. With "
            "MW_AUTHORITY_KEY: changes nothing, and prints the new MW_AUTHORITY_KEY, "
            "MW_AUTHORITY_KEY_ID and MW_AUTHORITY_RETIRED_KEYS to set on every process "
            "(the new seed is printed unless --seed-file is given).")

    def add_arguments(self, parser):
        parser.add_argument("--seed-file", metavar="FILE",
                            help="with MW_AUTHORITY_KEY: write the new seed to FILE (a new "
                                 "file, readable by its owner only) instead of printing it")

    def run(self, seed_file=None, **options):
        try:
            ring = signing_keys.keyring()
        except ImproperlyConfigured as error:
            raise CommandError(f"the authority keys as configured now do not load: {error}; "
                               "fix that first, nothing changed") from None
        if not settings.MW_AUTHORITY_KEY:
            if seed_file:
                raise CommandError("--seed-file is for MW_AUTHORITY_KEY deployments; with "
                                   "key files the new seed goes to the next key file")
            return self._rotate_files(ring)
        return self._print_environment(ring, seed_file)

    def _rotate_files(self, ring: signing_keys.Keyring) -> dict:
        try:
            current = signing_keys.rotate_key_file()
        except FileExistsError as error:
            raise CommandError(f"{error.filename} exists: another rotation just ran; "
                               "nothing changed") from None
        path = signing_keys.key_file(Path(settings.MW_AUTHORITY_KEY_FILE), current.number)
        return {"keyId": current.key_id, "publicKey": current.public_key,
                "retired": [key.key_id for key in ring.keys], "keyFile": str(path),
                "next": "the new key signs from now on; the old ones stay listed by "
                        "GET /api/v1/authority, so what they signed still verifies"}

    def _print_environment(self, ring: signing_keys.Keyring, seed_file: str | None) -> dict:
        new = Ed25519PrivateKey.generate()
        seed = canonical.private_key_b64url(new)
        key_id = f"authority#{ring.next_number}"
        now = format_time(datetime.now(UTC).replace(microsecond=0))
        retired = [signing_keys.Key(ring.current.key_id, ring.current.public_key, now),
                   *ring.retired]
        environment = {"MW_AUTHORITY_KEY": seed, "MW_AUTHORITY_KEY_ID": key_id,
                       "MW_AUTHORITY_RETIRED_KEYS": signing_keys.retired_setting(retired)}
        # The values must load as they are printed: the settings' own check, run now.
        signing_keys.from_environment(seed, key_id, environment["MW_AUTHORITY_RETIRED_KEYS"])
        if seed_file:
            _write_secret(Path(seed_file), seed)
            environment["MW_AUTHORITY_KEY"] = f"<the seed in {seed_file}>"
        return {"keyId": key_id, "publicKey": canonical.public_key_b64url(new),
                "retired": [key.key_id for key in retired], "set": environment,
                "next": "set these three variables on every process (web, workers, beat) "
                        "and restart them together; nothing changed until then. Keep no "
                        "copy of the old seed: its public key is all verifying needs."}


def _write_secret(path: Path, text: str) -> None:
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        raise CommandError(f"--seed-file {path}: {error.strerror}; nothing changed") from None
    with os.fdopen(descriptor, "w") as file:
        file.write(text + "\n")
