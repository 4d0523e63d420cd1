"""The Group's outgoing webhooks (apps/webhooks), for its owners and coordinators: the
list and a form to add one, each webhook's deliveries with every attempt, remove, and a
new secret. Other members get a 403 saying why; non-members the 404 of any page of the
Group. Forms post and redirect (with CSRF, as every form of the dashboard).

A secret is shown once: the POST that made it keeps it in the session, and the page the
redirect leads to takes it out as it shows it."""

from django import forms
from django.contrib import messages
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import mark_safe

from apps.webhooks import registry
from apps.webhooks.models import Attempt, Delivery
from mission_weave.protocol.errors import ProtocolError

from .views import _render, forbidden, member_page, not_found, post_action

SHOWN_ONCE = "mw-webhook-secret"  # session key: {webhook id: secret}, popped when shown
DELIVERIES_SHOWN = 50


def _breakable(event_type: str) -> str:
    """The type with a line break allowed after each dot: a long one fits 420 px."""
    return mark_safe(escape(event_type).replace(".", ".<wbr>"))  # escaped first


class WebhookForm(forms.Form):
    url = forms.CharField(label="URL", max_length=2000,
                          help_text="http:// or https://; it gets a signed JSON POST per event")
    format = forms.ChoiceField(choices=[("json", "JSON: the event document, signed"),
                                        ("slack", "Slack: a one-line text message")],
                               initial="json", widget=forms.RadioSelect)
    events = forms.MultipleChoiceField(
        label="Event types", required=False, widget=forms.CheckboxSelectMultiple,
        choices=[(t, _breakable(t)) for t in registry.EVENT_TYPES],
        help_text="none chosen: every event of the Group")


def manager_page(view):
    """A member page for owners and coordinators only (403 with the reason otherwise)."""
    @member_page
    def checked(request, viewer, *args, **kwargs):
        if not (viewer.is_owner or viewer.is_coordinator):
            return forbidden(request, viewer, "a Group's webhooks are seen and managed by "
                                              "its owners and coordinators")
        return view(request, viewer, *args, **kwargs)
    checked.__name__ = view.__name__
    return checked


on_webhook = post_action("dashboard:webhook")  # a GET of an action: to the webhook's page


@manager_page
def webhooks(request, viewer):
    form = WebhookForm(request.POST or None)
    refused, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            try:
                webhook, secret = registry.create(
                    viewer.group_id, form.cleaned_data["url"], form.cleaned_data["events"],
                    form.cleaned_data["format"], viewer.principal.id, timezone.now())
            except ProtocolError as error:
                refused, status = _refusal(error), 400
            else:
                request.session[SHOWN_ONCE] = {webhook.id: secret}
                return redirect("dashboard:webhook", viewer.group_id, webhook.id)
        else:
            status = 400
    return _render(request, viewer, "dashboard/webhooks.html", {
        "webhooks": _rows(viewer.group_id), "form": form, "refused": refused}, status)


def _rows(group_id: str) -> list:
    hooks = registry.of_group(group_id)
    counts: dict = {}
    for webhook_id, state in Delivery.objects.filter(group_id=group_id).values_list(
            "webhook_id", "state"):
        counts.setdefault(webhook_id, {}).setdefault(state, 0)
        counts[webhook_id][state] += 1
    return [{"webhook": w, "counts": sorted(counts.get(w.id, {}).items())} for w in hooks]


@manager_page
def webhook(request, viewer, webhook_id):
    try:
        hook = registry.get(webhook_id, viewer.group_id)
    except ProtocolError:
        return not_found(request)
    shown = request.session.pop(SHOWN_ONCE, {}) or {}
    deliveries = list(Delivery.objects.filter(group_id=viewer.group_id, webhook_id=hook.id)
                      .order_by("-sequence")[:DELIVERIES_SHOWN])
    attempts: dict = {}
    for attempt in Attempt.objects.filter(group_id=viewer.group_id,
                                          delivery_id__in=[d.id for d in deliveries]) \
            .order_by("number"):
        attempts.setdefault(attempt.delivery_id, []).append(attempt)
    return _render(request, viewer, "dashboard/webhook.html", {
        "webhook": hook, "secret": shown.get(hook.id),
        "deliveries": [{"delivery": d, "attempts": attempts.get(d.id, [])} for d in deliveries],
        "shown": DELIVERIES_SHOWN})


@on_webhook
@manager_page
def remove_webhook(request, viewer, webhook_id):
    try:
        hook = registry.remove(webhook_id, viewer.group_id)
    except ProtocolError:
        return not_found(request)
    messages.success(request, f"Webhook {hook.id} to {hook.url} removed, with its deliveries.")
    return redirect("dashboard:webhooks", viewer.group_id)


@on_webhook
@manager_page
def send_again(request, viewer, webhook_id):
    """One more attempt of a `failed` delivery (the form's `delivery` field)."""
    try:
        delivery = registry.send_again(webhook_id, viewer.group_id,
                                       request.POST.get("delivery", ""), timezone.now())
    except ProtocolError:
        return not_found(request)
    messages.success(request, f"Delivery {delivery.id} (#{delivery.sequence}) will be sent "
                              f"again now.")
    return redirect("dashboard:webhook", viewer.group_id, webhook_id)


@on_webhook
@manager_page
def rotate_webhook(request, viewer, webhook_id):
    try:
        hook, secret = registry.rotate(webhook_id, viewer.group_id, timezone.now())
    except ProtocolError:
        return not_found(request)
    request.session[SHOWN_ONCE] = {hook.id: secret}
    return redirect("dashboard:webhook", viewer.group_id, hook.id)


def _refusal(error: ProtocolError) -> dict:
    return {"code": error.code, "message": error.message, "details": error.details}
