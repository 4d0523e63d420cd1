"""prometheus_client's multiprocess mode: each process writes its counters to files of
its own (`<kind>_<pid>.db`) in one folder per host, and a scrape of any process sums
them all, so that every web process (`mission_weave.runtime.serve --workers N`) shows the whole
host's numbers.

`start()` runs once per process, from OperationsConfig.ready(), before any metric exists:
the mode is chosen when a metric is created. It removes what processes no longer running
left behind (their counters leave the sums; Prometheus reads that as a counter reset,
as it reads any restart).
"""

import glob
import logging
import os

from prometheus_client import multiprocess, values

log = logging.getLogger(__name__)

ENVIRONMENT = "PROMETHEUS_MULTIPROC_DIR"  # where prometheus_client looks for the folder


def start(folder) -> str | None:
    """Use `folder` for this process's metric files; the folder, or None when it cannot be
    written (then this process's metrics are its own)."""
    folder = str(folder)  # it wins over a PROMETHEUS_MULTIPROC_DIR inherited from a parent
    try:
        os.makedirs(folder, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(f"{folder} is not writable")
    except OSError as error:
        log.warning("metrics are per process: cannot use %s (%s)", folder, error)
        return None
    os.environ[ENVIRONMENT] = folder
    if not values.ValueClass._multiprocess:
        # The module chose its value class when it was imported, without the folder:
        # choose again (no metric of ours exists yet).
        values.ValueClass = values.MultiProcessValue()
    for pid in dead_pids(folder):
        for path in glob.glob(os.path.join(folder, f"*_{pid}.db")):
            try:
                os.remove(path)
            except FileNotFoundError:  # another process starting cleaned it first
                pass
            except OSError as error:  # e.g. left by another user: counted on, harmless
                log.warning("could not remove %s: %s", path, error)
    return folder


def folder() -> str | None:
    """The folder in use, or None in single-process mode."""
    return os.environ.get(ENVIRONMENT) if values.ValueClass._multiprocess else None


def forget_dead(folder: str) -> None:
    """Drop the live gauges (open connections, lag) of processes that died without
    saying so; their counters stay until the next start."""
    for pid in dead_pids(folder):
        multiprocess.mark_process_dead(pid, folder)


def dead_pids(folder: str) -> set:
    pids = set()
    for path in glob.glob(os.path.join(folder, "*_*.db")):
        pid = os.path.basename(path)[:-len(".db")].rpartition("_")[2]
        if pid.isdigit() and not alive(int(pid)):
            pids.add(int(pid))
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
