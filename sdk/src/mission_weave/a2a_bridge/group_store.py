"""The bridge's A2A tasks, kept across restarts: the SDK's InMemoryTaskStore (its lookups,
filters and pages), written through to a SQLite file and loaded from it at start.

Each row is one task as the A2A protobuf's bytes, with the owner it was saved for (the
SDK scopes tasks by the caller's user name) and its state, so that the bridge can find
the tasks it still has to follow (`unfinished`).
"""

import sqlite3
from pathlib import Path

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import Task, TaskState

from mission_weave.sdk.inbox import durable_sqlite

ENDED_STATES = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
                          TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED})


class Owner(User):
    """The user a stored task belongs to, when the bridge acts on it without a request."""

    def __init__(self, name: str):
        self.name = name

    @property
    def is_authenticated(self) -> bool:
        return bool(self.name)

    @property
    def user_name(self) -> str:
        return self.name


def owner_context(owner: str) -> ServerCallContext:
    return ServerCallContext(user=Owner(owner))


class DurableTaskStore(InMemoryTaskStore):
    def __init__(self, path: str | Path):
        super().__init__()
        self.db: sqlite3.Connection = durable_sqlite(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS tasks (id TEXT NOT NULL, owner TEXT NOT "
                        "NULL, state INTEGER NOT NULL, task BLOB NOT NULL, "
                        "PRIMARY KEY (owner, id))")

    async def load(self) -> None:
        """Every stored task into memory (once, at start)."""
        for owner, blob in self.db.execute("SELECT owner, task FROM tasks").fetchall():
            await super().save(Task.FromString(blob), owner_context(owner))

    def unfinished(self) -> list[tuple[Task, ServerCallContext]]:
        """The stored tasks that have not ended, each with its owner's context."""
        rows = self.db.execute("SELECT owner, task, state FROM tasks").fetchall()
        return [(Task.FromString(blob), owner_context(owner)) for owner, blob, state in rows
                if state not in ENDED_STATES]

    async def save(self, task: Task, context: ServerCallContext) -> None:
        self.db.execute("INSERT INTO tasks (id, owner, state, task) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (owner, id) DO UPDATE SET state = excluded.state, "
                        "task = excluded.task",
                        (task.id, context.user.user_name, task.status.state,
                         task.SerializeToString()))
        await super().save(task, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self.db.execute("DELETE FROM tasks WHERE id = ? AND owner = ?",
                        (task_id, context.user.user_name))
        await super().delete(task_id, context)
