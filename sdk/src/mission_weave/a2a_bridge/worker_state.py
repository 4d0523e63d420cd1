"""Which A2A task does which WorkItem: `{"<group>/<workItem>": {taskId, contextId,
blockedAt}}` in a
small JSON file beside the key, so that a WorkItem started again (after a block, a
checkpoint or a restart of the bridge) goes on with the same A2A task.

Written whole to a temporary file and renamed, so a crash never leaves half a file."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TaskLink:
    task_id: str
    context_id: str
    # The sequence of the work.block that relayed the task's question, until the task
    # moves on: what was said after it is the answer.
    blocked_at: int | None = None


class TaskLinks:
    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._links: dict[str, TaskLink] = {}
        if self.path.exists():
            saved = json.loads(self.path.read_text())
            self._links = {key: TaskLink(link["taskId"], link["contextId"],
                                         link.get("blockedAt"))
                           for key, link in saved.items()}

    @staticmethod
    def _key(group_id: str, work_item_id: str) -> str:
        return f"{group_id}/{work_item_id}"

    def get(self, group_id: str, work_item_id: str) -> TaskLink | None:
        return self._links.get(self._key(group_id, work_item_id))

    def link(self, group_id: str, work_item_id: str, link: TaskLink) -> None:
        key = self._key(group_id, work_item_id)
        if self._links.get(key) != link:
            self._links[key] = link
            self._save()

    def forget(self, group_id: str, work_item_id: str) -> None:
        if self._links.pop(self._key(group_id, work_item_id), None) is not None:
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".new")
        partial.write_text(json.dumps({key: {"taskId": link.task_id,
                                             "contextId": link.context_id,
                                             "blockedAt": link.blocked_at}
                                       for key, link in self._links.items()}, indent=2) + "\n")
        partial.replace(self.path)
