"""The notifications' two pages (issue 28): a person's e-mail address and, per Group they
belong to, how they hear of what waits on them there (Notifications); and for operators,
the mail the try-out caught and the outbox's latest mails with what became of each (Mail).

The address and the choices are the person's own settings, not Group data that the log
records: they are saved directly, like a password, never by a command."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import redirect, render

from apps.api.auth import user_principal
from apps.notify import mailbox
from apps.notify.models import EVERY, Mail, Preference

from . import access


class AddressForm(forms.Form):
    email = forms.EmailField(required=False, max_length=254, label="E-mail address",
                             help_text="Where the notifications go; empty: no mail at all.")


@login_required
def notifications(request):
    memberships = access.memberships(request.user)
    principal = user_principal(request.user).id
    chosen = dict(Preference.objects.filter(
        principal=principal, group_id__in=[m.group_id for m in memberships])
        .values_list("group_id", "choice"))
    valid = {value for value, _ in Preference.CHOICES}
    form = AddressForm(request.POST or None, initial={"email": request.user.email})
    status = 200
    if request.method == "POST":
        wanted = {m.group_id: request.POST.get(f"choice-{m.group_id}", EVERY)
                  for m in memberships}
        bad = sorted(g for g, c in wanted.items() if c not in valid)
        if form.is_valid() and not bad:
            with transaction.atomic():
                request.user.email = form.cleaned_data["email"]
                request.user.save(update_fields=["email"])
                for group_id, choice in wanted.items():
                    Preference.objects.update_or_create(
                        group_id=group_id, principal=principal, defaults={"choice": choice})
            messages.success(request, "Saved.")
            return redirect("dashboard:notifications")
        for group_id in bad:  # only a hand-made request sends another value
            form.add_error(None, f"For {group_id}, choose one of: {', '.join(sorted(valid))}.")
        chosen.update(wanted)
        status = 400
    groups = [{"membership": m, "choice": chosen.get(m.group_id, EVERY)} for m in memberships]
    return render(request, "dashboard/notify_preferences.html",
                  {"form": form, "groups": groups, "choices": Preference.CHOICES},
                  status=status)


@login_required
def mail(request):
    if not request.user.is_staff:  # signed in, so the login page would not help
        return render(request, "dashboard/notify_mail.html", {"staff_only": True}, status=403)
    return render(request, "dashboard/notify_mail.html", {
        "catching": mailbox.catching(), "caught": mailbox.caught(),
        "outbox": Mail.objects.order_by("-created_at", "-id")[:50]})
