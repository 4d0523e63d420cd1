"""Evidence (§13.2) as a tool takes it from an LLM, and as the protocol carries it:
`{id, subject, criteria, method, result, producer, timestamp, artifacts}`, the producer
always the sending Agent."""

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, Field

from mission_weave.protocol.json_types import JsonObject
from mission_weave.sdk.handler_context import evidence_record


class EvidenceInput(BaseModel):
    """One Evidence record: which acceptance criteria it covers and what was found."""

    criteria: list[str] = Field(description="Ids of the contract's acceptance criteria this "
                                "record covers, e.g. [\"ac1\", \"ac2\"]. Together, the records "
                                "must cover every criterion.")
    result: str = Field(description="What was found, starting with 'pass' or 'fail', e.g. "
                        "'pass: every section of the report has a paragraph'.")
    method: Annotated[str, Field(description="How it was checked, e.g. 'self-check', "
                                 "'word-count', 'ran the tests'.")] = "self-check"
    artifacts: Annotated[list[str] | None, Field(
        description="Content hashes ('sha256:...') the record cites. Default: what you "
                    "published for this deliverable (or for this WorkItem) in this "
                    "attempt.")] = None
    deliverable: Annotated[str | None, Field(
        description="The contract's deliverable id this record delivers (needed when the "
                    "contract has more than one deliverable); its artifacts deliver it.")] = None


def record(producer: str, work_item_id: str, given: EvidenceInput,
           default_artifacts: Iterable[str]) -> JsonObject:
    return evidence_record(
        producer, work_item_id, given.criteria, given.method, given.result,
        given.artifacts if given.artifacts is not None else default_artifacts,
        f"deliverable:{given.deliverable}" if given.deliverable else None)


def criteria_of(contract: JsonObject) -> list[str]:
    return [criterion["id"] for criterion in contract.get("acceptanceCriteria") or ()]
