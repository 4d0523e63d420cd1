"""mw_bench --blobs: blob upload and download throughput through daphne (PUT/GET
/api/v1/blobs, hashed on the server both ways; the client hashes what it downloads
too), beside `sha256sum` and `cp` of the same bytes in the same run, and the server
process's peak RSS growth while it moves them (memory must stay flat in blob size)."""

import hashlib
import http.client
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

from django.conf import settings

from apps.identity import registry

from . import http_lifecycles
from .harness import server

MIB = 1024 * 1024
CHUNK = MIB


def write_random(path: Path, size: int) -> str:
    """`size` fresh random bytes at `path`; their blob name."""
    hasher = hashlib.sha256()
    with open(path, "wb") as out:
        left = size
        while left:
            chunk = os.urandom(min(CHUNK, left))
            hasher.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    return "sha256:" + hasher.hexdigest()


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def sha256sum(path: Path) -> float:
    return timed(lambda: subprocess.run(["sha256sum", str(path)], check=True,
                                        stdout=subprocess.DEVNULL))


def cp(path: Path) -> float:
    copy = path.with_suffix(".copy")
    seconds = timed(lambda: subprocess.run(["cp", str(path), str(copy)], check=True))
    copy.unlink()
    return seconds


def connect(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=300, blocksize=CHUNK)


def upload(port: int, token: str, path: Path, name: str, size: int) -> float:
    connection = connect(port)
    with open(path, "rb") as body:
        started = time.perf_counter()
        connection.request("PUT", f"/api/v1/blobs/{name}", body=body, headers={
            "Authorization": f"Bearer {token}", "Content-Length": str(size),
            "Content-Type": "application/octet-stream"})
        response = connection.getresponse()
        answer = response.read()
        seconds = time.perf_counter() - started
    connection.close()
    if response.status != 201:
        raise RuntimeError(f"upload answered {response.status}: {answer[:300]!r}")
    return seconds


def download(port: int, token: str, name: str, size: int) -> float:
    connection = connect(port)
    started = time.perf_counter()
    connection.request("GET", f"/api/v1/blobs/{name}", headers={"Authorization": f"Bearer {token}"})
    response = connection.getresponse()
    hasher, got = hashlib.sha256(), 0
    while chunk := response.read(CHUNK):
        hasher.update(chunk)
        got += len(chunk)
    seconds = time.perf_counter() - started
    connection.close()
    if response.status != 200 or got != size or "sha256:" + hasher.hexdigest() != name:
        raise RuntimeError(f"download answered {response.status}, {got} bytes, wrong bytes")
    return seconds


# --- the server process's memory ---------------------------------------------------------


def daphne_pids(port: int) -> list[int]:
    """The daphne children of the `mission_weave.runtime.serve --port <port>` parent."""
    parent = None
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"mission_weave.runtime.serve" in argv and str(port).encode() in argv:
                parent = entry.name
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{parent}\n" in status:
                children.append(int(entry.name))
    return children


def memory_kib(pid: int) -> dict:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def reset_peak(pid: int) -> None:
    # Writing 5 to clear_refs resets VmHWM (peak RSS) to the current RSS (Linux >= 4.0).
    Path(f"/proc/{pid}/clear_refs").write_text("5")


# --- the scenario ---------------------------------------------------------------------------


def measure(port: int, token: str, pid: int, work: Path, size: int, repeats: int) -> dict:
    samples: dict[str, list[float]] = {"upload": [], "download": [], "sha256sum": [], "cp": []}
    growth = {"upload": 0, "download": 0}  # KiB over the RSS before each request

    def watched(what, request):
        before = memory_kib(pid)["VmRSS"]
        reset_peak(pid)
        samples[what].append(request())
        growth[what] = max(growth[what], memory_kib(pid)["VmHWM"] - before)

    before = memory_kib(pid)["VmRSS"]
    for k in range(repeats):
        path = work / f"blob-{size}-{k}.bin"
        name = write_random(path, size)  # fresh bytes: every upload stores a new blob
        sha256sum(path)  # once to warm the page cache, as the upload will find it
        samples["sha256sum"].append(sha256sum(path))
        samples["cp"].append(cp(path))
        watched("upload", partial(upload, port, token, path, name, size))
        watched("download", partial(download, port, token, name, size))
        path.unlink()
    rates = {what: round(size / MIB / (sum(seconds) / len(seconds)), 1)
             for what, seconds in samples.items()}
    return {"sizeMiB": size / MIB, "repeats": repeats, "MBps": rates,
            "uploadOverSha256sum": round(rates["upload"] / rates["sha256sum"], 3),
            "downloadOverSha256sum": round(rates["download"] / rates["sha256sum"], 3),
            "serverRssBeforeMiB": round(before / 1024, 1),
            "serverPeakRssGrowthMiB": {what: round(kib / 1024, 1) for what, kib in growth.items()}}


def scenario(sizes_mib: list, report) -> dict:
    run = uuid.uuid4().hex[:8]
    group, _ = registry.create_group(f"bench-blobs-{run}")
    agent = http_lifecycles.Agent(f"bb-{run}", [group], ["worker"])
    work = Path(tempfile.mkdtemp(prefix="bench-blobs-", dir=settings.MW_DATA_DIR))
    previous_root = os.environ.get("MW_BLOB_ROOT")
    os.environ["MW_BLOB_ROOT"] = str(work / "store")  # the server's blob store, thrown away
    results = []
    try:
        with server(1) as port:
            pids = daphne_pids(port)
            if len(pids) != 1:
                raise RuntimeError(f"expected one daphne process, found {pids}")
            warm = work / "warm.bin"
            upload(port, agent.token, warm, write_random(warm, MIB), MIB)  # imports, pools
            for size_mib in sizes_mib:
                repeats = max(3, min(20, 200 // size_mib))
                report(f"[blobs] {size_mib} MiB × {repeats}: sha256sum, cp, PUT, GET...")
                results.append(measure(port, agent.token, pids[0], work, size_mib * MIB,
                                       repeats))
    finally:
        if previous_root is None:
            os.environ.pop("MW_BLOB_ROOT", None)
        else:
            os.environ["MW_BLOB_ROOT"] = previous_root
        shutil.rmtree(work, ignore_errors=True)
    return {"scenario": "blobs", "webWorkers": 1, "sizes": results}
