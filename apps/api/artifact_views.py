"""REST reads of §13: an artifact, its provenance, a Context Package and the events it
cites. Members of the Group only (NOT_A_MEMBER otherwise, revealing nothing); an
artifact or package of another Group is as unknown here as one that does not exist."""

import re

from django.conf import settings
from django.http import JsonResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.views import APIView

from apps.artifacts import provenance
from apps.artifacts.artifact_store import PACKAGES
from apps.ledger import db, history
from mission_weave.protocol.errors import ProtocolError

from .openapi import ONE, errors, ref
from .views import int_param, member_of

HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


def _hash(text: str) -> str:
    if not HASH.match(text):
        raise ProtocolError("VALIDATION_ERROR", "an artifact is named sha256:<64 lowercase hex>",
                            {"path": "hash"})
    return text


class ArtifactView(APIView):
    @extend_schema(responses={200: ref("Artifact"), **errors("VALIDATION_ERROR", *ONE)},
                   summary="One artifact of the Group: its signed manifest (§13.1)",
                   description="`{hash, origin: published|received, manifest, publishedBy, "
                               "recordedAt, receivedFrom, forwardedTo}`")
    def get(self, request, group_id, hash):
        member_of(request, group_id)
        return JsonResponse(provenance.artifact_document(
            provenance.record(group_id, _hash(hash))))


class ProvenanceView(APIView):
    @extend_schema(responses={200: ref("Provenance"), **errors("VALIDATION_ERROR", *ONE)},
                   summary="The artifact's provenance graph (PROTOCOL §5)",
                   description="`{artifact, ancestors, descendants, edges: [{from, to}]}`; "
                               "`from` is a source, `to` what was derived from it.")
    def get(self, request, group_id, hash):
        member_of(request, group_id)
        return JsonResponse(provenance.graph(group_id, _hash(hash)))


def _version_param(request) -> int | None:
    return int_param(request, "version", None, minimum=1, maximum=2**31 - 1)


def _package(group_id: str, package_id: str, version: int | None) -> dict:
    if version is None:
        rows = db.fetch(f"SELECT doc FROM {PACKAGES} WHERE group_id = %s AND package_id = %s "
                        "ORDER BY version DESC LIMIT 1", [group_id, package_id])
    else:
        rows = db.fetch(f"SELECT doc FROM {PACKAGES} WHERE group_id = %s AND package_id = %s "
                        "AND version = %s", [group_id, package_id, version])
    if not rows:
        which = f" version {version}" if version is not None else ""
        raise ProtocolError("NOT_FOUND", f"no Context Package {package_id}{which} in this Group")
    return db.from_json(rows[0][0])


def package_document(record: dict) -> dict:
    return {"id": record["id"], "version": record["version"], "hash": record["hash"],
            "previousVersion": record["package"].get("previousVersion"),
            "previousHash": record["previousHash"], "package": record["package"],
            "publisher": record["publisher"], "publishedAt": record["at"]}


class ContextPackageView(APIView):
    @extend_schema(parameters=[OpenApiParameter("version", int)],
                   responses={200: ref("ContextPackageRecord"),
                              **errors("VALIDATION_ERROR", *ONE)},
                   summary="A Context Package, latest or ?version= (§13.3)",
                   description="`{id, version, hash, previousVersion, previousHash, package, "
                               "publisher, publishedAt}`; `package` is the signed document.")
    def get(self, request, group_id, package_id):
        member_of(request, group_id)
        return JsonResponse(package_document(_package(group_id, package_id,
                                                      _version_param(request))))


class ContextPackageEventsView(APIView):
    @extend_schema(parameters=[OpenApiParameter("version", int), OpenApiParameter("after", int),
                               OpenApiParameter("limit", int)],
                   responses={200: ref("ContextPackageEvents"),
                              **errors("VALIDATION_ERROR", *ONE)},
                   summary="The events a Context Package cites (§13.3)",
                   description="`{packageId, version, sourceEvents, events}`: the cited range "
                               "of this Group's log (archived events included), at most "
                               "`limit` after `after`; to members of this Group only.")
    def get(self, request, group_id, package_id):
        member_of(request, group_id)
        record = _package(group_id, package_id, _version_param(request))
        cited = record["package"]["sourceEvents"]
        after = int_param(request, "after", cited["from"] - 1, minimum=0)
        limit = int_param(request, "limit", settings.MW_EVENTS_PAGE_MAX, minimum=1,
                          maximum=settings.MW_EVENTS_PAGE_MAX)
        first = max(after + 1, cited["from"])
        last = min(cited["to"], first + limit - 1)
        events = history.events_between(group_id, first, last) if first <= last else []
        return JsonResponse({"packageId": record["id"], "version": record["version"],
                             "sourceEvents": cited, "events": events})

