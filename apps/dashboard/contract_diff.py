"""What changed between two revisions of a Work Contract, field by field, for the
revision history (templates/dashboard/_contract_diff.html). Pure: no Django.

Each change is {path, kind, before, after}: the path dotted and indexed like the
server's error paths ("deliverables[0].description", "budgets.tokens"), kind one of
added / removed / changed, and None for the side where the member is absent. The fields
are those of the contract form: an entry's JSON Schema and `allowed.resources` are one
value each, as is any list that is not keyed. A member absent on one side and empty on
the other ([], {} or false, which is what absence means for every optional member) has
not changed: the form leaves empty members out.
"""

ABSENT = object()
ADDED, REMOVED, CHANGED = "added", "removed", "changed"
IGNORED = {"revision"}  # it differs between any two revisions; the table's columns say it
# Arrays whose entries are matched by this member, not by position, so a reorder is no change.
KEYED = {"deliverables": "id", "acceptanceCriteria": "id", "capabilities": "id", "inputs": "ref"}
OPAQUE = {"deliverables.schema", "allowed.resources"}
# Lists of names that are sets: only a different membership is a change.
UNORDERED = {"dependencies.workItems", "allowed.tools", "allowed.data", "allowed.operations"}


def diff(before: dict, after: dict) -> list[dict]:
    changes: list[dict] = []
    _compare(before, after, "", "", changes)
    return changes


def _compare(before, after, path: str, shape: str, changes: list) -> None:
    """`shape` is the path without indices ("deliverables.schema"), naming the kind of field."""
    if before == after or _absent_or_empty(before, after):
        return
    if isinstance(before, dict) and isinstance(after, dict) and shape not in OPAQUE:
        for key in [*before, *(k for k in after if k not in before)]:
            if path or key not in IGNORED:
                _compare(before.get(key, ABSENT), after.get(key, ABSENT), _join(path, key),
                         _join(shape, key), changes)
        return
    key = KEYED.get(shape)
    if key and _keyed(before, key) and _keyed(after, key):
        _compare_entries(before, after, key, path, shape, changes)
        return
    if shape in UNORDERED and _same_members(before, after):
        return
    kind = ADDED if before is ABSENT else REMOVED if after is ABSENT else CHANGED
    changes.append({"path": path, "kind": kind, "before": _value(before),
                    "after": _value(after)})


def _compare_entries(before: list, after: list, key: str, path: str, shape: str,
                     changes: list) -> None:
    """Entries with the same key are compared wherever they stand; an entry's index in the
    path is where it stands after (before, for one removed)."""
    old = {entry[key]: entry for entry in before}
    new = {entry[key]: entry for entry in after}
    where = {entry[key]: index for index, entry in enumerate(before)}
    where.update({entry[key]: index for index, entry in enumerate(after)})
    for ident in [*new, *(i for i in old if i not in new)]:
        _compare(old.get(ident, ABSENT), new.get(ident, ABSENT), f"{path}[{where[ident]}]",
                 shape, changes)


def _keyed(entries, key: str) -> bool:
    """Every entry is an object with its own distinct string key (else: by position)."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return False
    keys = [e.get(key) for e in entries]
    return all(isinstance(k, str) for k in keys) and len(set(keys)) == len(keys)


def _same_members(before, after) -> bool:
    return (isinstance(before, list) and isinstance(after, list)
            and all(isinstance(name, str) for name in before + after)
            and sorted(before) == sorted(after))


def _absent_or_empty(before, after) -> bool:
    """One side is absent and the other [], {} or false."""
    value, other = (before, after) if after is ABSENT else (after, before)
    return other is ABSENT and (value is False or value == [] or value == {})


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _value(value):
    return None if value is ABSENT else value
