"""Signing in: the password form, and OpenID Connect around mozilla-django-oidc's views.

/oidc/authenticate/ and /oidc/callback/ are its views (mission_weave/urls.py), through
these subclasses (settings OIDC_AUTHENTICATE_CLASS, OIDC_CALLBACK_CLASS): a 404 while
OIDC is off, and every refusal (a forged or replayed state, the provider's error, a token
that does not check out, an unreachable provider) is a redirect to the refused page with
its reason, never a 400 or a 500. The user mapping is apps/identity/oidc.py."""

import logging
import re

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.utils.http import urlencode
from mozilla_django_oidc import views as oidc_views

log = logging.getLogger(__name__)

# The refused page's words for each reason (the query carries only the reason's name).
REASONS = {
    "state": "The answer from the sign-in provider did not belong to a sign-in started in "
             "this browser (its state was unknown or already used). It may have been "
             "forged, or opened twice.",
    "no_sign_in": "No sign-in was under way in this browser: it may have taken too long, "
                  "been started in another browser, or this browser refused our cookie.",
    "cancelled": "The sign-in was cancelled at the provider, or the provider refused it.",
    "provider": "The sign-in provider reported an error.",
    "issuer": "The answer came from another provider than the one configured here.",
    "token": "The sign-in provider's answer could not be verified (its code, signature or "
             "claims).",
    "unreachable": "The sign-in provider did not answer. Try again in a moment.",
    "inactive": "Your account here is deactivated. An operator can reactivate it.",
    "failed": "The sign-in did not succeed.",
}


def oidc_enabled() -> bool:
    return bool(settings.OIDC_RP_CLIENT_ID)


class SignInView(auth_views.LoginView):
    """The password form, and the "Sign in with ..." button when OIDC is configured."""

    template_name = "dashboard/login.html"
    next_page = "dashboard:groups"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["oidc_provider"] = settings.OIDC_PROVIDER_NAME if oidc_enabled() else None
        return context


def refused(request):
    """Where a refused OpenID Connect sign-in lands (LOGIN_REDIRECT_URL_FAILURE)."""
    reason = request.GET.get("reason", "failed")
    error = request.GET.get("error", "")
    return render(request, "dashboard/sign_in_refused.html", {
        "reason": reason if reason in REASONS else "failed",
        "message": REASONS.get(reason, REASONS["failed"]),
        # The provider's error code (RFC 6749 §4.1.2.1), when it is one: no free text.
        "error": error if re.fullmatch(r"[a-z_]{1,40}", error) else "",
        "oidc_provider": settings.OIDC_PROVIDER_NAME if oidc_enabled() else None,
    }, status=403)


def _not_found(request):
    return render(request, "dashboard/not_found.html", status=404)


class AuthenticateView(oidc_views.OIDCAuthenticationRequestView):
    """Sends the browser to the provider, the state, nonce and PKCE verifier kept in the
    session (mozilla-django-oidc)."""

    def dispatch(self, request, *args, **kwargs):
        if not oidc_enabled():
            return _not_found(request)
        return super().dispatch(request, *args, **kwargs)


class CallbackView(oidc_views.OIDCAuthenticationCallbackView):
    """The provider sends the browser back here with a code and the state."""

    def dispatch(self, request, *args, **kwargs):
        if not oidc_enabled():
            return _not_found(request)
        self.refusal, self.error = "failed", ""
        return super().dispatch(request, *args, **kwargs)

    def get(self, request):
        query, session = request.GET, request.session
        if query.get("error"):
            # mozilla-django-oidc drops the state and signs out whoever was signed in.
            # An RFC 6749 error code, or "other": it is logged and shown, so no free text.
            self.error = query["error"] if re.fullmatch(r"[a-z_]{1,40}", query["error"]) \
                else "other"
            self.refusal = "cancelled" if self.error == "access_denied" else "provider"
            return super().get(request)
        if "code" not in query or "state" not in query or "oidc_states" not in session:
            return self.login_failure("no_sign_in")
        if query["state"] not in session["oidc_states"]:
            # Forged, or replayed (a used state is dropped): mozilla-django-oidc would raise
            # SuspiciousOperation, a bare 400. The pending sign-ins stay as they are.
            return self.login_failure("state")
        if "iss" in query and query["iss"].rstrip("/") != settings.OIDC_OP_ISSUER:
            # RFC 9207: the answer names the provider that sent it (mix-up defence).
            del session["oidc_states"][query["state"]]
            session.save()
            return self.login_failure("issuer")
        return super().get(request)

    def login_failure(self, reason: str | None = None):
        noted = getattr(self.request, "oidc_refusal", None)  # logged by the backend, with why
        reason = reason or noted or self.refusal
        if not noted:
            log.warning("OIDC sign-in refused (%s)%s", reason,
                        f": the provider answered {self.error}" if self.error else "")
        params = {"reason": reason, **({"error": self.error} if self.error else {})}
        return HttpResponseRedirect(f"{resolve_url(self.failure_url)}?{urlencode(params)}")
