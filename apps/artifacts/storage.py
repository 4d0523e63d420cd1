"""Where blob bytes live: a Django Storage chosen by settings.

`filesystem` (default): content-addressed files under MW_BLOB_ROOT, sharded as
`ab/cd/abcd…` so no directory grows past 65,536 entries. `s3`: any S3-compatible
service through django-storages (boto3). Either way the only client input that
reaches a path is the validated 64-hex digest (apps/artifacts/blobs.py)."""

import os
import tempfile
from functools import cache
from pathlib import Path

from django.conf import settings
from django.core.files import File
from django.core.files.storage import Storage
from django.core.signals import setting_changed
from django.dispatch import receiver

BACKENDS = ("filesystem", "s3")


def blob_name(digest: str) -> str:
    """The storage name of a validated lowercase hex digest."""
    return f"{digest[:2]}/{digest[2:4]}/{digest}"


def storage_config() -> dict:
    """The {BACKEND, OPTIONS} that django.core.files.storage builds the blob storage from."""
    kind = settings.MW_BLOB_STORAGE
    if kind == "filesystem":
        # Blobs are immutable and named by content: writing the same name twice writes
        # the same bytes, and a re-upload must be able to repair a corrupted copy.
        return {"BACKEND": "django.core.files.storage.FileSystemStorage",
                "OPTIONS": {"location": str(settings.MW_BLOB_ROOT / "store"),
                            "allow_overwrite": True}}
    if kind == "s3":
        if not settings.MW_S3_BUCKET:
            raise ValueError("MW_BLOB_STORAGE=s3 needs MW_S3_BUCKET")
        return {"BACKEND": "storages.backends.s3.S3Storage",
                "OPTIONS": {"bucket_name": settings.MW_S3_BUCKET,
                            "endpoint_url": settings.MW_S3_ENDPOINT_URL,
                            "region_name": settings.MW_S3_REGION,
                            "access_key": settings.MW_S3_ACCESS_KEY_ID,
                            "secret_key": settings.MW_S3_SECRET_ACCESS_KEY,
                            "location": settings.MW_S3_PREFIX,
                            "file_overwrite": True,
                            "default_acl": None,
                            "querystring_auth": False,
                            # Reads are spooled to disk past 4 MiB (django-storages'
                            # default, 0, would keep a whole object in memory).
                            "max_memory_size": 4 * 1024 * 1024}}
    raise ValueError(f"MW_BLOB_STORAGE must be one of {', '.join(BACKENDS)}, not {kind!r}")


@cache
def blob_storage() -> Storage:
    from django.core.files.storage.handler import StorageHandler

    return StorageHandler({"blobs": storage_config()})["blobs"]


@receiver(setting_changed)
def _forget_storage(setting, **kwargs):
    if setting.startswith(("MW_BLOB_", "MW_S3_")):
        blob_storage.cache_clear()


def incoming_dir() -> Path:
    """Uploads are written here while they are hashed. For the filesystem storage it is
    beside the store on the same filesystem, so keeping a verified upload is a rename."""
    path = settings.MW_BLOB_ROOT / "incoming"
    path.mkdir(parents=True, exist_ok=True)
    return path


class IncomingFile(File):
    """A verified temporary upload. `temporary_file_path` lets FileSystemStorage move it
    into place with os.rename instead of copying the bytes again."""

    def __init__(self, path: str):
        # The File owns the handle and closes it, as Django's File does.
        super().__init__(open(path, "rb"), name=os.path.basename(path))  # noqa: SIM115
        self.path = path

    def temporary_file_path(self) -> str:
        return self.path


def new_incoming() -> tempfile._TemporaryFileWrapper:
    return tempfile.NamedTemporaryFile(dir=incoming_dir(), prefix="put-", delete=False)


def keep(digest: str, incoming_path: str) -> None:
    """Put a verified upload at its content address (replacing a corrupted copy). A
    copying backend (S3) leaves the upload behind: the caller removes it (blobs.put)."""
    with IncomingFile(incoming_path) as content:
        blob_storage().save(blob_name(digest), content)
