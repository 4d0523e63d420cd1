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
    return render(request, "dashboard/groups.html", {
        "memberships": access.memberships(request.user),
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


def _answer_on_item(request, viewer, item_id, outcome, **bound):
    return _answer(request, outcome,
                   lambda **e: _work_item(request, viewer, item_id, bound=bound, **e),
                   "dashboard:work_item", viewer.group_id, item_id)


def _text(request, name: str) -> str:
    return request.POST.get(name, "").strip()


def item_form_action(form_name: str, form_class, command: str, **form_kwargs):
    """A WorkItem page action: a small form whose body is one command on the item. An
    invalid form or a refusal shows the page again with what was typed."""
    @on_item
    @member_page
    def act(request, viewer, item_id):
        item = pages.work_item(viewer, item_id)
        extra = {key: value(viewer) for key, value in form_kwargs.items()}
        form = form_class(request.POST, prefix=form_name, **extra)
        if not form.is_valid():
            return _work_item(request, viewer, item_id, bound={form_name: form},
                              refused=_invalid(), status=400)
        outcome = actions.send(viewer, command, form.body(), timezone.now(), item.id)
        return _answer_on_item(request, viewer, item_id, outcome, **{form_name: form})
    act.__name__ = form_name
    return act


offer = item_form_action("offer", forms.OfferForm, "work.offer",
                         workers=pages.workers)
preempt = item_form_action("preempt", forms.PreemptForm, "work.request_preemption")
unblock = item_form_action("unblock", forms.UnblockForm, "work.unblock")
cancel = item_form_action("cancel", forms.CancelForm, "work.cancel")
create_child = item_form_action("child", forms.ChildMissionForm, "mission.create_child")
post_message = item_form_action("message", forms.MessageForm, "conversation.post")
grant_execution = item_form_action("grant", forms.GrantForm, "approval.grant_execution")
refuse_execution = item_form_action("refuse", forms.RefuseExecutionForm,
                                    "approval.refuse_execution")


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
        outcome = actions.accept_result(viewer, item, _text(request, "note"), {},
                                        timezone.now())
        return _answer_on_item(request, viewer, item_id, outcome)
    form = forms.AcceptForm(request.POST, item=item, overridden=override["overridden"])
    if not form.is_valid():
        return _work_item(request, viewer, item_id, bound={"accept": form},
                          refused=_invalid(), status=400)
    outcome = actions.accept_result(viewer, item, form.cleaned_data["note"], form.reasons(),
                                    timezone.now())
    return _answer_on_item(request, viewer, item_id, outcome, accept=form)


@on_item
@member_page
def fail(request, viewer, item_id):
    item = pages.work_item(viewer, item_id)
    criteria = [c for c in request.POST.getlist("criteria") if c in item.criteria_ids]
    outcome = actions.fail(viewer, item, criteria, _text(request, "reason") or "failed review",
                           request.POST.get("permanent") == "on", timezone.now())
    return _answer_on_item(request, viewer, item_id, outcome)


@on_mission
@member_page
def approve_mission(request, viewer, mission_id):
    pages.get_mission(viewer, mission_id)  # 404 for a Mission this viewer cannot see
    outcome = actions.approve_mission(viewer, mission_id, _text(request, "comment"),
                                      timezone.now())
    return _answer(request, outcome, lambda **e: _mission(request, viewer, mission_id, **e),
                   "dashboard:mission", viewer.group_id, mission_id)


def mission_form_action(form_name: str, form_class, **form_kwargs):
    """A Mission page action: a form whose `command()` and `body(mission_id)` are one
    command on the Mission. An invalid form or a refusal shows the page again as typed.
    `form_kwargs`: name -> f(viewer, mission_id), the form's other arguments."""
    @on_mission
    @member_page
    def act(request, viewer, mission_id):
        pages.get_mission(viewer, mission_id)  # 404 for a Mission this viewer cannot see
        extra = {key: value(viewer, mission_id) for key, value in form_kwargs.items()}
        form = form_class(request.POST, prefix=form_name, **extra)

        def again(**refusal):
            return _mission(request, viewer, mission_id, bound={form_name: form}, **refusal)

        if not form.is_valid():
            return again(refused=_invalid(), status=400)
        outcome = actions.send(viewer, form.command(), form.body(mission_id), timezone.now())
        return _answer(request, outcome, again, "dashboard:mission", viewer.group_id,
                       mission_id)
    act.__name__ = form_name
    return act


refuse_approval = mission_form_action("refuse", forms.RefuseApprovalForm, items=pages.items_of)
end_mission = mission_form_action("end", forms.EndMissionForm)


@on_mission
@member_page
def change_edge(request, viewer, mission_id):
    """Add or remove the edge `dependant` depends on `dependency` (a contract revision of
    the dependant). A cycle is refused with its path, drawn on the graph."""
    pages.get_mission(viewer, mission_id)
    dependant, dependency = _text(request, "dependant"), _text(request, "dependency")
    try:
        item = pages.work_item(viewer, dependant)
    except access.NotFound:
        item = None
    if item is None or item.mission_id != mission_id or not dependency:
        refused = {"code": "VALIDATION_ERROR", "details": {},
                   "message": "Choose a WorkItem of this Mission and the WorkItem it should "
                              "depend on."}
        return _mission(request, viewer, mission_id, refused=refused, status=400)
    outcome = actions.change_edge(viewer, item, dependency, _text(request, "op") != "remove",
                                  timezone.now())
    return _answer(request, outcome, lambda **e: _mission(request, viewer, mission_id, **e),
                   "dashboard:mission", viewer.group_id, mission_id)


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
