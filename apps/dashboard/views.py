"""The dashboard's pages and forms. Thin: check who is looking (apps/dashboard/access.py),
read (pages.py) or act through the append pipeline (actions.py), render."""

import logging
from datetime import timedelta
from functools import wraps

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpResponseNotAllowed, HttpResponseServerError
from django.shortcuts import redirect, render
from django.utils import timezone

from apps.api import error_responses as api_errors
from apps.identity.models import OidcIdentity
from mission_weave.protocol.timefmt import format_time

from . import access, actions, contract_form, forms, pages
from . import artifact_content as content
from . import submissions as submission_pages

log = logging.getLogger(__name__)


def not_found(request):
    return render(request, "dashboard/not_found.html", status=404)


# Django's error handlers (mission_weave/urls.py): the API's envelope under /api/, pages
# elsewhere. The 500 page is plain text in HTML, with no template and no database: either
# may be what failed.
SERVER_ERROR_PAGE = ("<!doctype html><title>Server error · MissionWeave</title><h1>Server "
                     "error</h1><p>The server failed; the request changed nothing it did not "
                     "report. Try again; if it keeps failing, tell the operator.</p>")


def handler404(request, exception=None):
    if request.path_info.startswith("/api/"):
        return api_errors.handler404(request, exception)
    return not_found(request)


def handler500(request):
    if request.path_info.startswith("/api/"):
        return api_errors.handler500(request)
    log.error("internal error on %s %s", request.method, request.path)
    return HttpResponseServerError(SERVER_ERROR_PAGE)


def member_page(view):
    """Logged in, and a member of the Group in the URL; anything this viewer may not see
    is the same 404 as what does not exist."""
    @login_required
    @wraps(view)
    def checked(request, group_id, *args, **kwargs):
        try:
            viewer = access.viewer(request.user, group_id)
            # The head before the page's reads: a commit in between is signalled again.
            request.head_sequence = pages.head_sequence(viewer)
            return view(request, viewer, *args, **kwargs)
        except access.NotFound:
            return not_found(request)
    return checked


def _render(request, viewer, template, context, status=200):
    return render(request, template, {"viewer": viewer, "head_sequence": request.head_sequence,
                                      **context}, status=status)


@login_required
def groups(request):
    """The home page: what waits on this human ("Waiting on me"), their Missions and their
    Groups."""
    group_id, mission_id = request.GET.get("group") or None, request.GET.get("mission") or None
    memberships = access.memberships(request.user)
    if not memberships:  # e.g. a first OIDC sign-in: who they are, for the operator
        return render(request, "dashboard/no_group.html",
                      {"oidc_identity": OidcIdentity.objects.filter(user=request.user).first()})
    return render(request, "dashboard/groups.html", {
        "memberships": memberships,
        "my_missions": pages.my_missions(request.user),
        "waiting": pages.inbox(request.user, timezone.now(), group_id, mission_id),
        "filter_group": group_id or "", "filter_mission": mission_id or ""})


@member_page
def group(request, viewer):
    return _render(request, viewer, "dashboard/group.html", pages.group_page(viewer))


@member_page
def mission(request, viewer, mission_id):
    return _mission(request, viewer, mission_id)


def _mission(request, viewer, mission_id, refused=None, status=200, bound=None):
    expanded = set(filter(None, request.GET.get("expand", "").split(",")))
    cycle = (refused or {}).get("details", {}).get("cycle")
    page = pages.mission_page(viewer, mission_id, expanded, cycle)
    return _render(request, viewer, "dashboard/mission.html",
                   {**page, "forms": mission_forms(page, bound or {}), "refused": refused},
                   status)


def mission_forms(page: dict, bound: dict) -> dict:
    """The Mission page's forms, blank unless a refused POST left one bound."""
    return {"end": bound.get("end") or forms.EndMissionForm(prefix="end"),
            "refuse": bound.get("refuse") or forms.RefuseApprovalForm(prefix="refuse",
                                                                      items=page["items"])}


@member_page
def work_item(request, viewer, item_id):
    return _work_item(request, viewer, item_id)


def _work_item(request, viewer, item_id, refused=None, status=200, bound=None):
    page = pages.work_item_page(viewer, item_id, timezone.now(), request.GET.get("diff"))
    sent = next(iter((bound or {}).values()), None)  # a refused form, shown with the refusal
    return _render(request, viewer, "dashboard/work_item.html",
                   {**page, "forms": item_forms(viewer, page, bound or {}),
                    "refused": refused, "sent": sent}, status)


def item_forms(viewer, page: dict, bound: dict) -> dict:
    """The WorkItem page's forms, blank unless a refused POST left one bound."""
    blank = {"offer": lambda prefix: forms.OfferForm(prefix=prefix, workers=pages.workers(viewer)),
             "preempt": forms.PreemptForm, "unblock": forms.UnblockForm,
             "cancel": forms.CancelForm, "child": forms.ChildMissionForm,
             "message": forms.MessageForm,
             "grant": forms.GrantForm, "refuse": forms.RefuseExecutionForm}
    made = {name: bound.get(name) or make(prefix=name) for name, make in blank.items()}
    made["accept"] = bound.get("accept") or forms.AcceptForm(
        item=page["item"], overridden=(page["override"] or {}).get("overridden", []))
    return made


@member_page
def artifact(request, viewer, name):
    """The artifact reader: its content by media type (a page of it), manifest, provenance."""
    page = pages.artifact_page(viewer, name, timezone.now(), _page_number(request),
                               request.GET.get("as") == "text")
    return _reader_page(_render(request, viewer, "dashboard/artifact.html", page))


@member_page
def artifact_content(request, viewer, name):
    """The raw bytes, verified, sandboxed (apps/dashboard/artifact_content.py); after the
    same checks as the artifact page, so whoever may not see it gets the same 404."""
    record = pages.artifact_record(viewer, name)
    return content.response(viewer, record, timezone.now(), request.GET.get("download") == "1")


@member_page
def submissions(request, viewer, item_id):
    page = submission_pages.page(viewer, item_id, timezone.now(), request.GET.get("at"))
    return _reader_page(_render(request, viewer, "dashboard/submissions.html", page))


def _page_number(request) -> int:
    try:
        return int(request.GET.get("page", "1"))
    except ValueError:
        return 1


def _reader_page(response):
    """A page that shows agent content (sanitized) gets a CSP that loads nothing from
    elsewhere and runs only the dashboard's own scripts."""
    response["Content-Security-Policy"] = content.PAGE_CSP
    return response


# --- actions: each one command through the pipeline; a refusal is shown, nothing changes

def post_action(page: str):
    """An action URL acts on POST only. A GET (the browser's refresh of the page a refused
    POST rendered at this URL, a link or a bookmark) is sent to `page`, the page the action
    belongs to, named by the same URL arguments: never the browser's "HTTP ERROR 405".
    The page itself says who may see it."""
    def decorate(view):
        @wraps(view)
        def act(request, *args, **kwargs):
            if request.method in ("GET", "HEAD"):
                return redirect(page, *args, **kwargs)
            if request.method != "POST":
                return HttpResponseNotAllowed(["POST"])
            return view(request, *args, **kwargs)
        return act
    return decorate


on_item = post_action("dashboard:work_item")
on_mission = post_action("dashboard:mission")
logout = post_action("dashboard:groups")(
    auth_views.LogoutView.as_view(next_page="dashboard:login"))


def _answer(request, outcome, again, *to):
    """After an acceptance, back to the page with what it appended (POST-redirect-GET);
    after a refusal, the page again with the PROTOCOL error, at the error's HTTP status."""
    if not outcome.accepted:
        return again(refused=outcome.error, status=outcome.status)
    _recorded(request, outcome)
    return redirect(*to)


def _recorded(request, outcome) -> None:
    appended = ", ".join(f"{e['type']} #{e['sequence']}" for e in outcome.events)
    messages.success(request, f"Recorded: {appended}")


def _invalid() -> dict:
    """A form the dashboard itself could not turn into a command: shown like a refusal."""
    return {"code": "VALIDATION_ERROR", "details": {},
            "message": "Some fields need fixing (marked below)."}


def _again_on_item(request, viewer, item_id, **bound):
    """The WorkItem page shown again with a refusal, with the `bound` forms as typed."""
    return lambda **refusal: _work_item(request, viewer, item_id, bound=bound, **refusal)


def _again_on_mission(request, viewer, mission_id, **bound):
    """The Mission page shown again with a refusal, with the `bound` forms as typed."""
    return lambda **refusal: _mission(request, viewer, mission_id, bound=bound, **refusal)


def _send_on_item(request, viewer, item_id, form, command: str):
    """The usual WorkItem action: `command` on the item with the form's body(). A form to
    fix (400) or a refusal shows the page again with the form as typed."""
    item = pages.work_item(viewer, item_id)
    again = _again_on_item(request, viewer, item_id, **{form.prefix: form})
    if not form.is_valid():
        return again(refused=_invalid(), status=400)
    outcome = actions.send(viewer, command, form.body(), timezone.now(), item.id)
    return _answer(request, outcome, again, "dashboard:work_item", viewer.group_id, item_id)


def _send_on_mission(request, viewer, mission_id, form):
    """The usual Mission action (on a Mission this viewer can see): the form's command()
    with its body(mission_id). A form to fix (400) or a refusal shows the page again, a
    prefixed form as typed."""
    again = _again_on_mission(request, viewer, mission_id,
                              **({form.prefix: form} if form.prefix else {}))
    if not form.is_valid():
        return again(refused=_invalid(), status=400)
    outcome = actions.send(viewer, form.command(), form.body(mission_id), timezone.now())
    return _answer(request, outcome, again, "dashboard:mission", viewer.group_id, mission_id)


# Every action has one shape: a named view for POST (on_item / on_mission) by a member,
# its input read through a form (apps/dashboard/forms.py), one command sent through the
# pipeline (actions.py), answered by _answer.

@on_item
@member_page
def offer(request, viewer, item_id):
    form = forms.OfferForm(request.POST, prefix="offer", workers=pages.workers(viewer))
    return _send_on_item(request, viewer, item_id, form, "work.offer")


@on_item
@member_page
def preempt(request, viewer, item_id):
    form = forms.PreemptForm(request.POST, prefix="preempt")
    return _send_on_item(request, viewer, item_id, form, "work.request_preemption")


@on_item
@member_page
def unblock(request, viewer, item_id):
    form = forms.UnblockForm(request.POST, prefix="unblock")
    return _send_on_item(request, viewer, item_id, form, "work.unblock")


@on_item
@member_page
def cancel(request, viewer, item_id):
    form = forms.CancelForm(request.POST, prefix="cancel")
    return _send_on_item(request, viewer, item_id, form, "work.cancel")


@on_item
@member_page
def create_child(request, viewer, item_id):
    form = forms.ChildMissionForm(request.POST, prefix="child")
    return _send_on_item(request, viewer, item_id, form, "mission.create_child")


@on_item
@member_page
def post_message(request, viewer, item_id):
    form = forms.MessageForm(request.POST, prefix="message")
    return _send_on_item(request, viewer, item_id, form, "conversation.post")


@on_item
@member_page
def grant_execution(request, viewer, item_id):
    form = forms.GrantForm(request.POST, prefix="grant")
    return _send_on_item(request, viewer, item_id, form, "approval.grant_execution")


@on_item
@member_page
def refuse_execution(request, viewer, item_id):
    form = forms.RefuseExecutionForm(request.POST, prefix="refuse")
    return _send_on_item(request, viewer, item_id, form, "approval.refuse_execution")


@on_item
@member_page
def accept_result(request, viewer, item_id):
    """Accepting is a decision: a note, and a reason per criterion it overrides (the
    review evaluated again now, as the pipeline will), else the form again. Whoever could
    not accept this item now is answered by the pipeline's refusal instead."""
    item = pages.work_item(viewer, item_id)
    mission = pages.get_mission(viewer, item.mission_id)
    override = pages.acceptance_override(item)
    if override is None or not viewer.coordinates(mission):
        form, bound = forms.AcceptNoteForm(request.POST), {}
    else:
        form = forms.AcceptForm(request.POST, item=item, overridden=override["overridden"])
        bound = {"accept": form}
    again = _again_on_item(request, viewer, item_id, **bound)
    if not form.is_valid():
        return again(refused=_invalid(), status=400)
    outcome = actions.accept_result(viewer, item, form.cleaned_data["note"], form.reasons(),
                                    timezone.now())
    return _answer(request, outcome, again, "dashboard:work_item", viewer.group_id, item_id)


@on_item
@member_page
def fail(request, viewer, item_id):
    item = pages.work_item(viewer, item_id)
    form = forms.FailForm(request.POST, criteria=item.criteria_ids)
    again = _again_on_item(request, viewer, item_id)
    if not form.is_valid():
        return again(refused=_invalid(), status=400)
    outcome = actions.fail(viewer, item, form.cleaned_data["criteria"], form.reason_given(),
                           form.cleaned_data["permanent"], timezone.now())
    return _answer(request, outcome, again, "dashboard:work_item", viewer.group_id, item_id)


@on_mission
@member_page
def approve_mission(request, viewer, mission_id):
    pages.get_mission(viewer, mission_id)  # 404 for a Mission this viewer cannot see
    form = forms.ApproveMissionForm(request.POST)
    return _send_on_mission(request, viewer, mission_id, form)


@on_mission
@member_page
def refuse_approval(request, viewer, mission_id):
    pages.get_mission(viewer, mission_id)
    form = forms.RefuseApprovalForm(request.POST, prefix="refuse",
                                    items=pages.items_of(viewer, mission_id))
    return _send_on_mission(request, viewer, mission_id, form)


@on_mission
@member_page
def end_mission(request, viewer, mission_id):
    pages.get_mission(viewer, mission_id)
    form = forms.EndMissionForm(request.POST, prefix="end")
    return _send_on_mission(request, viewer, mission_id, form)


EDGE_TO_FIX = {"code": "VALIDATION_ERROR", "details": {},
               "message": "Choose a WorkItem of this Mission and the WorkItem it should "
                          "depend on."}


@on_mission
@member_page
def change_edge(request, viewer, mission_id):
    """Add or remove the edge `dependant` depends on `dependency` (a contract revision of
    the dependant). A cycle is refused with its path, drawn on the graph."""
    pages.get_mission(viewer, mission_id)
    form = forms.EdgeForm(request.POST)
    again = _again_on_mission(request, viewer, mission_id)
    item = _item_of(viewer, mission_id, form.cleaned_data["dependant"]) \
        if form.is_valid() else None
    if item is None:
        return again(refused=EDGE_TO_FIX, status=400)
    outcome = actions.change_edge(viewer, item, form.cleaned_data["dependency"], form.adds(),
                                  timezone.now())
    return _answer(request, outcome, again, "dashboard:mission", viewer.group_id, mission_id)


def _item_of(viewer, mission_id, item_id):
    """The WorkItem of this Mission by that id, if this viewer can see it; else None."""
    try:
        item = pages.work_item(viewer, item_id)
    except access.NotFound:
        return None
    return item if item.mission_id == mission_id else None


def forbidden(request, viewer, why: str):
    """A form page this viewer could not use: said at once, rather than on sending."""
    return _render(request, viewer, "dashboard/forbidden.html",
                   {"refused": {"code": "FORBIDDEN", "message": why, "details": {}}}, 403)


@member_page
def new_mission(request, viewer):
    if not (viewer.is_coordinator or viewer.is_owner):
        return forbidden(request, viewer, "creating a Mission takes the coordinator or the "
                                          "owner role in this Group")
    choices = {"owners": pages.principals_with(viewer, "owner", humans_only=True),
               "coordinators": pages.principals_with(viewer, "coordinator")}
    form = forms.MissionForm(request.POST or None, **choices,
                             initial={"coordinator": viewer.principal.id,
                                      "owner": viewer.principal.id})
    refused, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            outcome = actions.send(viewer, "mission.create", form.body(), timezone.now())
            if outcome.accepted:
                _recorded(request, outcome)
                return redirect("dashboard:mission", viewer.group_id,
                                outcome.events[0]["missionId"])
            refused, status = outcome.error, outcome.status
        else:
            refused, status = _invalid(), 400
    return _render(request, viewer, "dashboard/mission_new.html",
                   {"form": form, "refused": refused}, status)


# --- the Work Contract: a new WorkItem, an authorized proposal, a revision ----------------

def _text(request, name: str) -> str:
    return request.POST.get(name, "").strip()


def _contract_page(request, viewer, mission, *, title, command, body_of, contract,
                   exclude=None, done=None, context=None):
    """GET: the contract form (from `contract`); POST: `command` with body_of(contract).
    INVALID_CONTRACT and the other refusals are shown beside the field they name, with
    everything typed kept."""
    if not viewer.coordinates(mission):
        return forbidden(request, viewer, f"the contracts of Mission {mission.id} are its "
                                          "Coordinator's (or a delegate's) to write")
    choices = [(i.id, f"{i.id}: {i.contract['goal'][:60]}")
               for i in pages.items_of(viewer, mission.id) if i.id != exclude]
    refused, status = None, 200
    if request.method == "POST":
        form = contract_form.ContractForm.from_post(request.POST, choices)
        sent = form.contract()
        if sent is None:
            refused, status = _invalid(), 400
        else:
            outcome = actions.send(viewer, command, body_of(sent), timezone.now(),
                                   None if exclude is None else exclude)
            if outcome.accepted:
                _recorded(request, outcome)
                item_id = done or outcome.events[-1]["workItemId"]
                return redirect("dashboard:work_item", viewer.group_id, item_id)
            refused, status = outcome.error, outcome.status
            form.add_server_error(refused)
    else:
        deadline = (timezone.now() + DEFAULT_DEADLINE).replace(microsecond=0)
        form = contract_form.ContractForm.from_contract(contract, choices,
                                                        default_deadline=format_time(deadline))
    return _render(request, viewer, "dashboard/contract.html",
                   {"mission": mission, "title": title, "contract_form": form,
                    "refused": refused, **(context or {})}, status)


DEFAULT_DEADLINE = timedelta(days=7)


@member_page
def new_item(request, viewer, mission_id):
    mission = pages.get_mission(viewer, mission_id)
    item_id = _text(request, "work_item_id")
    return _contract_page(
        request, viewer, mission, title="Add a WorkItem", command="work.authorize",
        contract=None, context={"ask_id": True},
        body_of=lambda contract: {"missionId": mission.id, "contract": contract,
                                  **({"workItemId": item_id} if item_id else {})})


@member_page
def authorize_proposal(request, viewer, mission_id, proposal_id):
    mission = pages.get_mission(viewer, mission_id)
    proposal = pages.proposal(viewer, mission_id, proposal_id)
    return _contract_page(
        request, viewer, mission, title=f"Authorize proposal {proposal.id} by {proposal.proposer}",
        command="work.authorize", contract=proposal.contract, context={"proposal": proposal},
        body_of=lambda contract: {"missionId": mission.id, "proposalId": proposal.id,
                                  "contract": contract})


@member_page
def revise(request, viewer, item_id):
    item = pages.work_item(viewer, item_id)
    mission = pages.get_mission(viewer, item.mission_id)
    return _contract_page(
        request, viewer, mission,
        title=f"Revise {item.id} (now at revision {item.contract_revision})",
        command="work.revise_contract", contract=item.contract, exclude=item.id, done=item.id,
        context={"item": item}, body_of=lambda contract: {"contract": contract})
