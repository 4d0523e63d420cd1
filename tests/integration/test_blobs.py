"""The blob store (PROTOCOL §5): streamed, verified uploads; verified retrievals; access
by uploader or artifact-holding Group; size limits; storage selection."""

import asyncio
import hashlib
import logging
import os
import tracemalloc
from pathlib import Path

import pytest
from django.utils import timezone

from apps.artifacts import blobs, storage
from apps.artifacts.models import Artifact, Blob, BlobUpload
from mission_weave.protocol.errors import ProtocolError
from mission_weave.runtime.http_handler import PooledSyncASGIHandler
from tests.support import World, assert_error

MIB = 1024 * 1024
pytestmark = pytest.mark.usefixtures("blob_root")


def name_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def auth(actor) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {actor.token}"} if actor.token else {}


def put(actor, name: str, data: bytes):
    return actor.client.put(f"/api/v1/blobs/{name}", data=data,
                            content_type="application/octet-stream", **auth(actor))


def get(actor, name: str):
    return actor.client.get(f"/api/v1/blobs/{name}", **auth(actor))


def body(response) -> bytes:
    return b"".join(response.streaming_content)


def stored_path(name: str):
    return storage.blob_storage().path(storage.blob_name(name.split(":", 1)[1]))


def incoming_files() -> list:
    return os.listdir(storage.incoming_dir())


@pytest.fixture
def world(db):
    return World()


@pytest.fixture
def alice(world):
    return world.agent("alice")


@pytest.fixture
def bob(world):
    return world.agent("bob")


# --- upload and download -------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1000, 5 * MIB + 3])  # empty, one read, two passes
def test_upload_then_download_roundtrip(alice, size, blob_root):
    data = os.urandom(size)
    name = name_of(data)

    response = put(alice, name, data)

    assert response.status_code == 201, response.content
    assert response.json() == {"hash": name, "size": size}
    digest = name.split(":", 1)[1]
    path = stored_path(name)
    assert path == str(blob_root / "store" / digest[:2] / digest[2:4] / digest)
    assert Path(path).read_bytes() == data
    assert Blob.objects.get(hash=name).size == size
    assert incoming_files() == []

    download = get(alice, name)
    assert download.status_code == 200
    assert download["Content-Type"] == "application/octet-stream"
    assert int(download["Content-Length"]) == size
    assert download["ETag"] == f'"{name}"'
    assert body(download) == data


def test_put_of_an_existing_blob_succeeds_without_rewriting(alice):
    data = b"the same bytes"
    name = name_of(data)
    assert put(alice, name, data).status_code == 201
    before = os.stat(stored_path(name))

    again = put(alice, name, data)

    assert again.status_code == 200
    assert again.json() == {"hash": name, "size": len(data)}
    after = os.stat(stored_path(name))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert Blob.objects.filter(hash=name).count() == 1
    assert incoming_files() == []


def test_a_human_user_can_upload_and_read_back(world):
    owner = world.human("olga")
    data = b"a human's report"
    assert put(owner, name_of(data), data).status_code == 201
    assert body(get(owner, name_of(data))) == data
    assert BlobUpload.objects.get(blob_id=name_of(data)).principal == "user:olga"


# --- verification --------------------------------------------------------------------------


def test_hash_mismatch_on_upload_keeps_nothing(alice):
    claimed = name_of(b"what was promised")

    response = put(alice, claimed, b"something else")

    error = assert_error(response, 422, "HASH_MISMATCH")
    assert error["details"]["expected"] == claimed
    assert error["details"]["actual"] == name_of(b"something else")
    assert not Blob.objects.filter(hash=claimed).exists()
    assert not BlobUpload.objects.exists()
    assert not os.path.exists(stored_path(claimed))
    assert incoming_files() == []


def test_hash_mismatch_against_an_existing_blob_changes_nothing(alice, bob):
    data = b"alice's bytes"
    name = name_of(data)
    put(alice, name, data)

    assert_error(put(bob, name, b"bob pretends"), 422, "HASH_MISMATCH")

    assert Path(stored_path(name)).read_bytes() == data
    # Naming a blob without its bytes earns no access to it.
    assert_error(get(bob, name), 403, "NOT_A_MEMBER")


@pytest.mark.parametrize("size", [1000, 5 * MIB])  # the one-read and the two-pass paths
def test_a_blob_corrupted_on_disk_is_never_served_and_is_reported(alice, size, caplog):
    data = os.urandom(size)
    name = name_of(data)
    put(alice, name, data)
    with open(stored_path(name), "r+b") as stored:
        stored.seek(size // 2)
        stored.write(bytes([data[size // 2] ^ 0xFF]))

    with caplog.at_level(logging.ERROR, logger="apps.artifacts.blobs"):
        response = get(alice, name)

    error = assert_error(response, 500, "HASH_MISMATCH")
    assert error["details"] == {"hash": name}
    assert data[:64] not in response.content  # none of the blob in the answer
    assert any(record.levelno == logging.ERROR and name in record.getMessage()
               for record in caplog.records)
    assert Blob.objects.get(hash=name).corrupted_at is not None
    # Still refused on the next read, and repaired by uploading the right bytes.
    assert_error(get(alice, name), 500, "HASH_MISMATCH")
    assert put(alice, name, data).status_code == 201
    assert Blob.objects.get(hash=name).corrupted_at is None
    assert body(get(alice, name)) == data


def test_a_blob_missing_from_storage_is_reported_not_served(alice, caplog):
    data = b"to be lost"
    name = name_of(data)
    put(alice, name, data)
    os.unlink(stored_path(name))

    with caplog.at_level(logging.ERROR, logger="apps.artifacts.blobs"):
        assert_error(get(alice, name), 500, "HASH_MISMATCH")

    assert Blob.objects.get(hash=name).corrupted_at is not None
    assert any(record.levelno == logging.ERROR for record in caplog.records)


def test_a_truncated_blob_is_not_served(alice):
    data = os.urandom(5 * MIB)
    name = name_of(data)
    put(alice, name, data)
    with open(stored_path(name), "r+b") as stored:
        stored.truncate(len(data) - 1)

    assert_error(get(alice, name), 500, "HASH_MISMATCH")


# --- names and limits ----------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "sha256:" + "A" * 64,                       # uppercase
    "sha256:" + "a" * 63,                       # too short
    "sha256:" + "a" * 65,                       # too long
    "sha256:" + "g" * 64,                       # not hex
    "a" * 64,                                   # no algorithm
    "sha512:" + "a" * 64,                       # another algorithm
    "sha256:../../../../etc/passwd",            # a path
    "sha256:" + "a" * 62 + "/..",               # a path hidden in a hash
    "../" + "a" * 64,
    "sha256:%2e%2e%2f" + "a" * 55,
])
def test_bad_blob_names_are_refused(alice, name):
    assert_error(put(alice, name, b"x"), 400, "VALIDATION_ERROR")
    assert_error(get(alice, name), 400, "VALIDATION_ERROR")
    assert not Blob.objects.exists()


def test_a_declared_size_over_the_limit_is_refused(alice, settings):
    settings.MW_BLOB_MAX_BYTES = 1000
    data = b"x" * 1001

    error = assert_error(put(alice, name_of(data), data), 413, "PAYLOAD_TOO_LARGE")

    assert error["details"] == {"maxBytes": 1000}
    assert not Blob.objects.exists()
    assert incoming_files() == []
    data = b"x" * 1000
    assert put(alice, name_of(data), data).status_code == 201  # the limit itself is allowed


@pytest.mark.parametrize("length", ["²", "+4", "1" * 5000, "-1"])
def test_a_content_length_that_is_no_plain_whole_number_is_refused(alice, length):
    data = b"blob"
    response = alice.client.put(f"/api/v1/blobs/{name_of(data)}", data=data,
                                content_type="application/octet-stream",
                                CONTENT_LENGTH=length, **auth(alice))

    assert "Content-Length" in assert_error(response, 400, "VALIDATION_ERROR")["message"]
    assert not Blob.objects.exists()


def test_a_stream_longer_than_the_limit_is_cut_off_and_nothing_kept(settings, db):
    settings.MW_BLOB_MAX_BYTES = 3 * MIB
    data = b"y" * (4 * MIB)

    with pytest.raises(ProtocolError) as refused:
        blobs.put(name_of(data).split(":")[1], iter([data[:MIB]] * 4), "agent:x",
                  timezone.now())

    assert refused.value.code == "PAYLOAD_TOO_LARGE"
    assert not Blob.objects.exists()
    assert not os.path.exists(stored_path(name_of(data)))
    assert incoming_files() == []


def test_unauthenticated_requests_are_refused(world, client):
    data = b"anonymous"
    assert_error(client.put(f"/api/v1/blobs/{name_of(data)}", data=data,
                            content_type="application/octet-stream"), 401, "UNAUTHENTICATED")
    assert_error(client.get(f"/api/v1/blobs/{name_of(data)}"), 401, "UNAUTHENTICATED")
    assert_error(client.get(f"/api/v1/blobs/{name_of(data)}",
                            HTTP_AUTHORIZATION="Bearer forged"), 401, "UNAUTHENTICATED")
    assert not Blob.objects.exists()


# --- access --------------------------------------------------------------------------------


def test_another_agent_cannot_read_and_learns_nothing(alice, bob):
    data = b"alice's secret"
    put(alice, name_of(data), data)

    existing = get(bob, name_of(data))
    missing = get(bob, name_of(b"never uploaded"))

    assert_error(existing, 403, "NOT_A_MEMBER")
    assert_error(missing, 403, "NOT_A_MEMBER")
    assert existing.json()["error"]["message"] == missing.json()["error"]["message"]
    assert existing.json()["error"]["details"] == missing.json()["error"]["details"] == {}


def test_members_of_a_group_holding_an_artifact_for_it_can_read(alice, world):
    data = b"published bytes"
    name = name_of(data)
    put(alice, name, data)
    reader = world.agent("reader")            # a member of alice's Group, not the uploader
    elsewhere = World().agent("outsider")     # a member of another Group only
    assert_error(get(reader, name), 403, "NOT_A_MEMBER")

    # The artifact.published projection row (written here directly: the access check
    # reads only the projection).
    Artifact.objects.create(group=world.group, hash=name, origin="published",
                            producer="alice", doc={}, recorded_at=timezone.now())

    assert body(get(reader, name)) == data
    assert_error(get(elsewhere, name), 403, "NOT_A_MEMBER")


def test_a_second_uploader_with_the_bytes_gains_read_access(alice, bob):
    data = b"common knowledge"
    put(alice, name_of(data), data)

    # As if new (201): what alice stored is not bob's to learn (PROTOCOL §5).
    assert put(bob, name_of(data), data).status_code == 201
    assert put(bob, name_of(data), data).status_code == 200  # his own, already there

    assert body(get(bob, name_of(data))) == data
    assert set(BlobUpload.objects.values_list("principal", flat=True)) == {
        "agent:alice", "agent:bob"}


# --- storage selection ---------------------------------------------------------------------


def test_the_filesystem_storage_is_the_default(blob_root):
    backend = storage.blob_storage()
    assert type(backend).__name__ == "FileSystemStorage"
    assert backend.location == str(blob_root / "store")


def test_s3_is_selected_and_configured_by_settings(settings):
    # Configuration only: there is no S3 service here, and nothing is sent to one.
    settings.MW_BLOB_STORAGE = "s3"
    settings.MW_S3_BUCKET = "mw-blobs"
    settings.MW_S3_ENDPOINT_URL = "http://127.0.0.1:9000"
    settings.MW_S3_REGION = "eu-west-1"
    settings.MW_S3_PREFIX = "tenant-a/blobs"

    backend = storage.blob_storage()

    assert type(backend).__module__ == "storages.backends.s3"
    assert backend.bucket_name == "mw-blobs"
    assert backend.endpoint_url == "http://127.0.0.1:9000"
    assert backend.region_name == "eu-west-1"
    assert backend.location == "tenant-a/blobs"
    assert backend.file_overwrite is True
    assert backend.querystring_auth is False
    assert backend.max_memory_size == 4 * MIB  # reads spooled to disk, not held in memory


@pytest.mark.parametrize("kind, bucket", [("s3", ""), ("ftp", "b")])
def test_an_incomplete_or_unknown_storage_setting_is_refused(settings, kind, bucket):
    settings.MW_BLOB_STORAGE = kind
    settings.MW_S3_BUCKET = bucket
    with pytest.raises(ValueError):
        storage.blob_storage()


# --- through the ASGI handler daphne runs: streaming and memory ----------------------------


class Asgi:
    """Drive mission_weave.runtime.http_handler's handler in-process with a body produced
    lazily and a response consumed without keeping it, so that only the server side holds
    memory."""

    def __init__(self):
        self.app = PooledSyncASGIHandler()

    def request(self, method, path, token, chunks=(), content_length=None):
        headers = [(b"authorization", f"Bearer {token}".encode()),
                   (b"content-type", b"application/octet-stream")]
        if content_length is not None:
            headers.append((b"content-length", str(content_length).encode()))
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
                 "query_string": b"", "root_path": "", "headers": headers,
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80)}
        return asyncio.run(self._call(scope, iter(chunks)))

    async def _call(self, scope, chunks):
        answer = {"status": None, "size": 0, "sha256": hashlib.sha256(), "json": b""}
        finished = asyncio.Event()

        async def receive():
            chunk = next(chunks, None)
            if chunk is not None:
                return {"type": "http.request", "body": chunk, "more_body": True}
            if not answer.get("ended"):
                answer["ended"] = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await finished.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                answer["headers"] = dict(message["headers"])
            elif message["type"] == "http.response.body":
                part = message.get("body", b"")
                answer["size"] += len(part)
                answer["sha256"].update(part)
                if answer["status"] != 200:
                    answer["json"] += part
                if not message.get("more_body"):
                    finished.set()

        await self.app(scope, receive, send)
        return answer


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_over_the_limit_is_refused_while_streaming(settings, tmp_path):
    settings.MW_BLOB_MAX_BYTES = 2 * MIB
    alice = World().agent("alice")
    piece = b"z" * (256 * 1024)
    name = name_of(piece * 12)

    # No Content-Length (chunked transfer): only counting the stream can catch it.
    answer = Asgi().request("PUT", f"/api/v1/blobs/{name}", alice.token, [piece] * 12)

    assert answer["status"] == 413, answer
    assert b'"PAYLOAD_TOO_LARGE"' in answer["json"]
    assert not Blob.objects.exists()
    assert incoming_files() == []


@pytest.mark.django_db(transaction=True)
def test_the_declared_size_is_refused_before_the_body_is_read(settings):
    settings.MW_BLOB_MAX_BYTES = MIB
    alice = World().agent("alice")

    # The body is one byte whose hash is the name: only Content-Length can refuse it.
    answer = Asgi().request("PUT", f"/api/v1/blobs/{name_of(b'x')}", alice.token, [b"x"],
                            content_length=MIB + 1)

    assert answer["status"] == 413, answer
    assert b'"PAYLOAD_TOO_LARGE"' in answer["json"]
    assert not Blob.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_memory_stays_flat_on_a_64_mib_upload_and_download():
    alice = World().agent("alice")
    piece = os.urandom(64 * 1024)
    count = 1024  # 64 MiB, produced on the fly from one 64 KiB piece
    hasher = hashlib.sha256()
    for _ in range(count):
        hasher.update(piece)
    name = "sha256:" + hasher.hexdigest()
    asgi = Asgi()

    tracemalloc.start()
    try:
        uploaded = asgi.request("PUT", f"/api/v1/blobs/{name}", alice.token,
                                (piece for _ in range(count)), content_length=64 * MIB)
        _, upload_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        downloaded = asgi.request("GET", f"/api/v1/blobs/{name}", alice.token)
        _, download_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert uploaded["status"] == 201, uploaded
    assert downloaded["status"] == 200
    assert downloaded["size"] == 64 * MIB
    assert "sha256:" + downloaded["sha256"].hexdigest() == name
    # The blob is 64 MiB; a streamed path holds a few 1 MiB chunks at a time.
    print(f"tracemalloc peaks: upload {upload_peak / MIB:.1f} MiB, "
          f"download {download_peak / MIB:.1f} MiB")
    assert upload_peak < 12 * MIB, upload_peak
    assert download_peak < 12 * MIB, download_peak


# --- through a live daphne (mission_weave/runtime/daphne_blobs.py) -------------------------


@pytest.mark.django_db(transaction=True)
def test_through_daphne_bodies_are_streamed_with_memory_flat(monkeypatch, settings, tmp_path):
    import http.client

    from django.db import connection

    from apps.bench import blob_throughput as bench
    from apps.bench.harness import database_url_of, server

    monkeypatch.setenv("DATABASE_URL", database_url_of(connection.settings_dict))
    monkeypatch.setenv("MW_BLOB_ROOT", str(tmp_path / "served"))
    monkeypatch.setenv("MW_BLOB_MAX_BYTES", str(80 * MIB))
    alice = World().agent("alice")
    size = 64 * MIB
    path = tmp_path / "big.bin"
    name = bench.write_random(path, size)

    with server(1) as port:
        [pid] = bench.daphne_pids(port)
        before = bench.memory_kib(pid)["VmRSS"]
        bench.reset_peak(pid)
        bench.upload(port, alice.token, path, name, size)  # raises unless 201
        upload_growth = bench.memory_kib(pid)["VmHWM"] - before
        before = bench.memory_kib(pid)["VmRSS"]
        bench.reset_peak(pid)
        bench.download(port, alice.token, name, size)  # raises unless the same bytes
        download_growth = bench.memory_kib(pid)["VmHWM"] - before

        # Chunked (no Content-Length) past the limit: refused while streaming.
        chunked = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        chunked.request("PUT", f"/api/v1/blobs/{name_of(b'a')}",
                        body=(b"a" * MIB for _ in range(81)), encode_chunked=True,
                        headers={"Authorization": f"Bearer {alice.token}"})
        refused = chunked.getresponse()
        assert refused.status == 413
        assert b"PAYLOAD_TOO_LARGE" in refused.read()

        # Any other large body still reaches its view whole (not handed over as a file).
        other = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        other.request("POST", "/api/v1/sessions", body=b'{"pad": "' + b"x" * 300_000 + b'"}',
                      headers={"Content-Type": "application/json"})
        answer = other.getresponse()
        assert answer.status == 400
        assert b"not valid JSON" not in answer.read()  # it parsed the JSON it was sent

    print(f"daphne peak RSS growth: upload {upload_growth / 1024:.1f} MiB, "
          f"download {download_growth / 1024:.1f} MiB for a 64 MiB blob")
    assert upload_growth < 16 * 1024, upload_growth
    assert download_growth < 16 * 1024, download_growth
    assert Blob.objects.get(hash=name).size == size


@pytest.mark.django_db(transaction=True)
def test_concurrent_uploads_of_one_new_blob_store_it_once_for_every_uploader():
    import threading

    from django.db import connection

    data = os.urandom(2 * MIB)
    digest = name_of(data).split(":", 1)[1]
    principals = [f"agent:racer-{k}" for k in range(4)]
    barrier, results, errors = threading.Barrier(len(principals)), [], []

    def upload(principal):
        try:
            barrier.wait()
            results.append(blobs.put(digest, iter([data[:MIB], data[MIB:]]), principal,
                                     timezone.now()))
        except Exception as error:  # reported below, with the thread's failure
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=upload, args=(p,)) for p in principals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert len(results) == 4 and {r.size for r in results} == {len(data)}
    assert Blob.objects.filter(hash=name_of(data)).count() == 1
    assert set(BlobUpload.objects.values_list("principal", flat=True)) == set(principals)
    assert Path(stored_path(name_of(data))).read_bytes() == data
    assert incoming_files() == []
