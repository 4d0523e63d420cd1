"""Blobs, artifact manifests, Evidence and Context Packages (§13).

Blobs are nobody's Group data (named by content, shared by every Group that cites them):
reference tables once the database is distributed. The projections' keys all include
the Group: in the database each primary key is (id, group_id) (migration 0003; Django's
state keeps `id` as the pk). tests/integration/test_distribution_keys.py holds every
table to this."""

from django.db import models


class Blob(models.Model):
    """Bytes stored outside the event log, named by their SHA-256 (PROTOCOL §5).

    The bytes live in the blob storage (apps/artifacts/storage.py) at a path derived
    only from the hash; this row says they were verified on upload, how large they
    are, and whether a later read found them corrupted."""

    hash = models.CharField(primary_key=True, max_length=71)  # sha256:<64 lowercase hex>
    size = models.BigIntegerField()
    created_at = models.DateTimeField()
    # Set when a retrieval found the stored bytes no longer match the name; such a
    # blob is never served again until an upload of the right bytes repairs it.
    corrupted_at = models.DateTimeField(null=True)

    def __str__(self):
        return self.hash


class BlobUpload(models.Model):
    """A principal that sent the blob's bytes (verified against the name). Uploading
    proves possession, so each uploader may read the blob back."""

    blob = models.ForeignKey(Blob, on_delete=models.CASCADE, related_name="uploads")
    principal = models.CharField(max_length=200)  # agent:<id> | user:<username>
    uploaded_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["blob", "principal"],
                                               name="blob_upload_unique")]

    def __str__(self):
        return f"{self.blob_id} from {self.principal}"


# --- projections of the log (§13.1, §13.3): written only by the append pipeline
# (apps/artifacts/artifact_store.py), rebuilt from the log and compared by mw_verify.

class Artifact(models.Model):
    """An artifact known to a Group: published there (`artifact.published`) or
    forwarded into it from another Group (`artifact.received`). Its identity is the
    content hash, one per Group; `doc` holds the signed manifest and its record."""

    group = models.ForeignKey("ledger.Group", on_delete=models.PROTECT)
    hash = models.CharField(max_length=71)
    origin = models.CharField(max_length=20)  # published | received
    mission_id = models.CharField(max_length=100, null=True)
    work_item_id = models.CharField(max_length=100, null=True)
    producer = models.CharField(max_length=100)
    doc = models.JSONField()
    recorded_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "hash"],
                                               name="artifact_unique")]
        indexes = [models.Index(fields=["group", "work_item_id"]),
                   models.Index(fields=["hash"])]

    def __str__(self):
        return f"{self.hash} in {self.group_id}"


class ArtifactEdge(models.Model):
    """One edge of a Group's provenance graph: `derived` lists `source` among its
    manifest's sources. Derived from the artifacts' manifests, kept for the recursive
    queries of apps/artifacts/provenance.py."""

    group = models.ForeignKey("ledger.Group", on_delete=models.PROTECT)
    source = models.CharField(max_length=71)
    derived = models.CharField(max_length=71)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "derived", "source"],
                                               name="artifact_edge_unique")]
        indexes = [models.Index(fields=["group", "source"])]

    def __str__(self):
        return f"{self.derived} from {self.source}"


class ContextPackage(models.Model):
    """One version of a Context Package (§13.3); `doc` holds the signed package and
    the hash of the version it replaces."""

    group = models.ForeignKey("ledger.Group", on_delete=models.PROTECT)
    package_id = models.CharField(max_length=100)
    version = models.PositiveIntegerField()
    mission_id = models.CharField(max_length=100)
    work_item_id = models.CharField(max_length=100, null=True)
    doc = models.JSONField()
    published_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "package_id", "version"],
                                               name="context_package_unique")]

    def __str__(self):
        return f"{self.package_id} v{self.version}"
