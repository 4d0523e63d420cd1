"""The Mission's WorkItem graph (§10.4): dependency policies and cycle detection."""

from collections.abc import Iterable, Mapping, Sequence

from .state import CANCELLED, VERIFIED

POLICIES = ("all_verified", "any_verified", "all_terminal")


def dependencies_met(policy: str, dependency_states: Sequence[str]) -> bool:
    """Whether WorkItems in `dependency_states` satisfy `policy` (no dependencies: met)."""
    if not dependency_states:
        return True
    if policy == "any_verified":
        return VERIFIED in dependency_states
    if policy == "all_terminal":
        return all(state in (VERIFIED, CANCELLED) for state in dependency_states)
    return all(state == VERIFIED for state in dependency_states)


def cycle_through(item_id: str, new_dependencies: Iterable[str],
                  edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """The path that `item_id -> new_dependencies` would close into a cycle, or None.
    `edges` maps each WorkItem id to the ids it depends on."""
    stack = [(dep, [item_id, dep]) for dep in new_dependencies]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        if node == item_id:
            return path
        if node in seen:
            continue
        seen.add(node)
        stack.extend((nxt, [*path, nxt]) for nxt in edges.get(node, ()))
    return None
