"""The dashboard's pages and forms. Thin: check who is looking (apps/dashboard/access.py),
read (pages.py) or act through the append pipeline (actions.py), render."""

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from . import access, actions, pages


def not_found(request):
    return render(request, "dashboard/not_found.html", status=404)


def member_page(view):
    """Logged in, and a member of the Group in the URL; anything this viewer may not see
    is the same 404 as what does not exist."""
    @login_required
    @wraps(view)
    def checked(request, group_id, *args, **kwargs):
        try:
            viewer = access.viewer(request.user, group_id)
            return view(request, viewer, *args, **kwargs)
        except access.NotFound:
            return not_found(request)
    return checked


def _render(request, viewer, template, context, status=200):
    return render(request, template, {"viewer": viewer, **context}, status=status)


@login_required
def groups(request):
    return render(request, "dashboard/groups.html",
                  {"memberships": access.memberships(request.user)})


@member_page
def group(request, viewer):
    return _render(request, viewer, "dashboard/group.html", pages.group_page(viewer))


@member_page
def mission(request, viewer, mission_id):
    return _mission(request, viewer, mission_id)


def _mission(request, viewer, mission_id, refused=None, status=200):
    return _render(request, viewer, "dashboard/mission.html",
                   {**pages.mission_page(viewer, mission_id), "refused": refused}, status)


@member_page
def work_item(request, viewer, item_id):
    return _work_item(request, viewer, item_id)


def _work_item(request, viewer, item_id, refused=None, status=200):
    return _render(request, viewer, "dashboard/work_item.html",
                   {**pages.work_item_page(viewer, item_id), "refused": refused}, status)


@member_page
def artifact(request, viewer, name):
    return _render(request, viewer, "dashboard/artifact.html", pages.artifact_page(viewer, name))


# --- actions: each one command through the pipeline; a refusal is shown, nothing changes

def _answer(request, outcome, again, *to):
    """After an acceptance, back to the page with what it appended (POST-redirect-GET);
    after a refusal, the page again with the PROTOCOL error, at the error's HTTP status."""
    if not outcome.accepted:
        return again(refused=outcome.error, status=outcome.status)
    appended = ", ".join(f"{e['type']} #{e['sequence']}" for e in outcome.events)
    messages.success(request, f"Recorded: {appended}")
    return redirect(*to)


def _answer_on_item(request, viewer, item_id, outcome):
    return _answer(request, outcome, lambda **e: _work_item(request, viewer, item_id, **e),
                   "dashboard:work_item", viewer.group_id, item_id)


def _text(request, name: str) -> str:
    return request.POST.get(name, "").strip()


@require_POST
@member_page
def accept_result(request, viewer, item_id):
    item = pages.work_item(viewer, item_id)
    outcome = actions.accept_result(viewer, item, _text(request, "note"), timezone.now())
    return _answer_on_item(request, viewer, item_id, outcome)


@require_POST
@member_page
def fail(request, viewer, item_id):
    item = pages.work_item(viewer, item_id)
    criteria = [c for c in request.POST.getlist("criteria") if c in item.criteria_ids]
    outcome = actions.fail(viewer, item, criteria, _text(request, "reason") or "failed review",
                           request.POST.get("permanent") == "on", timezone.now())
    return _answer_on_item(request, viewer, item_id, outcome)


@require_POST
@member_page
def grant_execution(request, viewer, item_id):
    pages.work_item(viewer, item_id)
    outcome = actions.grant_execution(viewer, item_id, _text(request, "comment"), timezone.now())
    return _answer_on_item(request, viewer, item_id, outcome)


@require_POST
@member_page
def approve_mission(request, viewer, mission_id):
    pages.get_mission(viewer, mission_id)  # 404 for a Mission this viewer cannot see
    outcome = actions.approve_mission(viewer, mission_id, _text(request, "comment"),
                                      timezone.now())
    return _answer(request, outcome, lambda **e: _mission(request, viewer, mission_id, **e),
                   "dashboard:mission", viewer.group_id, mission_id)
