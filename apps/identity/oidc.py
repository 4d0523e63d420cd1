"""Humans who sign in through an OpenID provider: one Django user per (issuer, sub).

mozilla-django-oidc runs the code flow (state, nonce and PKCE kept in the session, the ID
token's signature checked against the provider's keys). What it leaves to us, done here:
- the ID token's issuer and audience (it checks neither) and its `sub`;
- the user: found by (issuer, sub) in `OidcIdentity`, never by e-mail. An e-mail is
  whatever the provider says today; a provider that lets a person choose theirs would
  otherwise hand them the local account (and the Groups) of whoever has it. A first
  sign-in makes a new user, even when a local account has the same e-mail or name;
- its username: `<readable>-<8 hex of sha256(issuer, sub)>`, fixed at the first sign-in,
  so the principal `user:<username>` that memberships name stays the same when the person
  changes e-mail or name, and a name chosen at the provider cannot take over a local one;
- refusals: every way a sign-in fails is a reason on the request (`request.oidc_refusal`)
  that apps/dashboard/sign_in.py shows, never a 500.

The client secret and the tokens are never logged."""

import hashlib
import logging
import re
import unicodedata

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from .models import OidcIdentity

log = logging.getLogger(__name__)

# Why a sign-in was refused (the refused page says it in words).
UNREACHABLE = "unreachable"  # the provider did not answer
TOKEN = "token"  # the provider's answer did not check out (code, signature, nonce, claims)
INACTIVE = "inactive"  # the user is deactivated here


class Refused(SuspiciousOperation):
    """A sign-in refused for `reason`; mozilla-django-oidc turns it into a failed login."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def checked_claims(payload: dict, issuer: str, client_id: str) -> str:
    """The ID token's `sub`, once its issuer and audience are this provider and this client
    (OpenID Connect Core §3.1.3.7; its signature, expiry and nonce are already checked)."""
    # Compared without a trailing "/", which OIDC_OP_ISSUER drops (Auth0's issuers end in one).
    iss = payload.get("iss")
    if not isinstance(iss, str) or iss.rstrip("/") != issuer.rstrip("/"):
        raise Refused(TOKEN, f"ID token issuer {payload.get('iss')!r} is not {issuer!r}")
    audience = payload.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience
    if not isinstance(audiences, list) or client_id not in audiences:
        raise Refused(TOKEN, "ID token is not for this client (aud)")
    if len(audiences) > 1 and payload.get("azp") != client_id:
        raise Refused(TOKEN, "ID token with several audiences names another party (azp)")
    if "exp" not in payload:
        raise Refused(TOKEN, "ID token has no expiry (exp)")
    subject = payload.get("sub")
    if not isinstance(subject, str) or not 0 < len(subject) <= 255:
        raise Refused(TOKEN, "ID token has no usable subject (sub)")
    return subject


def username_for(issuer: str, subject: str, claims: dict) -> str:
    """`<readable>-<8 hex>`: readable for the operator who grants memberships, unique and
    fixed by (issuer, sub). The readable part is taken from what the provider says now and
    never updated; it decides nothing."""
    readable = ""
    for claim in ("preferred_username", "email", "name"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            readable = value.split("@")[0] if claim == "email" else value
            break
    # The principal pattern (core/schemas.py): a letter or digit first, then [A-Za-z0-9_.@+-];
    # accents dropped rather than the letter (Zoë: zoe).
    readable = unicodedata.normalize("NFKD", readable).encode("ascii", "ignore").decode()
    readable = re.sub(r"[^a-z0-9_.+-]+", "-", readable.lower())
    readable = re.sub(r"^[^a-z0-9]+", "", readable)[:40].rstrip("-.") or "user"
    digest = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:8]
    return f"{readable}-{digest}"


def _profile(claims: dict) -> dict:
    """The user's e-mail and names from the claims. An e-mail the provider says it has not
    verified is not kept (notifications would go to it)."""
    email = claims.get("email")
    verified = claims.get("email_verified")  # a string at some providers
    if not isinstance(email, str) or verified is False or str(verified).lower() == "false":
        email = ""
    try:
        validate_email(email)
    except ValidationError:
        email = ""
    first = claims.get("given_name") or ("" if claims.get("family_name") else claims.get("name"))
    last = claims.get("family_name")
    return {"email": email[:254],
            "first_name": (first if isinstance(first, str) else "")[:150],
            "last_name": (last if isinstance(last, str) else "")[:150]}


def user_for(issuer: str, subject: str, claims: dict):
    """The Django user of (issuer, sub): made at the first sign-in, its e-mail and names
    brought up to date at each one. Two first sign-ins at once make one user (the loser of
    the unique constraint reads the winner's)."""
    for _attempt in range(2):
        try:
            with transaction.atomic():
                return _user_for(issuer, subject, claims)
        except IntegrityError:
            continue
    raise Refused(TOKEN, "the user of this sign-in could not be recorded")


def _user_for(issuer: str, subject: str, claims: dict):
    User = get_user_model()
    profile = _profile(claims)
    identity = (OidcIdentity.objects.select_for_update().select_related("user")
                .filter(issuer=issuer, subject=subject).first())
    if identity is None:
        base = username_for(issuer, subject, claims)
        username, n = base, 1
        # A local account may hold the name already: a new name, never that account.
        while User.objects.filter(username=username).exists():
            n += 1
            username = f"{base}-{n}"
        user = User(username=username, **profile)
        user.set_unusable_password()  # signs in through the provider only
        user.save()
        OidcIdentity.objects.create(issuer=issuer, subject=subject, user=user,
                                    email=profile["email"], last_sign_in_at=timezone.now())
        log.info("OIDC: first sign-in of %s at %s, user %s", subject, issuer, username)
        return user
    user, given = identity.user, profile["email"]
    if user.email not in ("", identity.email):
        # An address the person chose here (the Notifications page) is theirs to keep.
        profile["email"] = user.email
    changed = [field for field, value in profile.items() if getattr(user, field) != value]
    for field in changed:
        setattr(user, field, profile[field])
    if changed:
        user.save(update_fields=changed)
    identity.email, identity.last_sign_in_at = given, timezone.now()
    identity.save(update_fields=["email", "last_sign_in_at"])
    return user


def _refuse(request, reason: str, message: str) -> None:
    request.oidc_refusal = reason
    log.warning("OIDC sign-in refused (%s): %s", reason, message)


class OidcBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, with the user found by (issuer, sub) only."""

    def authenticate(self, request, **kwargs):
        if "nonce" not in kwargs:  # a password sign-in, not our callback's
            return None
        try:
            return super().authenticate(request, **kwargs)
        except Refused as refused:
            _refuse(request, refused.reason, str(refused))
        except (requests.ConnectionError, requests.Timeout) as error:
            _refuse(request, UNREACHABLE, f"the provider did not answer: {type(error).__name__}")
        except (requests.RequestException, SuspiciousOperation, jwt.PyJWTError, ValueError,
                KeyError, TypeError) as error:
            # A refused code (replayed, expired, PKCE), a bad signature or nonce, an answer
            # that is not JSON: the message names the step, never a token or the secret.
            _refuse(request, TOKEN, f"{type(error).__name__}: {str(error)[:300]}")
        return None

    def get_or_create_user(self, access_token, id_token, payload):
        try:
            subject = checked_claims(payload, settings.OIDC_OP_ISSUER, self.OIDC_RP_CLIENT_ID)
            userinfo = self.get_userinfo(access_token, id_token, payload)
            # OpenID Connect Core §5.3.2: userinfo of another subject must not be used.
            if not isinstance(userinfo, dict) or userinfo.get("sub") != subject:
                raise Refused(TOKEN, "userinfo is about another subject than the ID token")
            user = user_for(settings.OIDC_OP_ISSUER, subject, {**payload, **userinfo})
        except Refused as refused:
            # mozilla-django-oidc logs and swallows a SuspiciousOperation from here: keep why.
            _refuse(self.request, refused.reason, str(refused))
            return None
        if not user.is_active:
            _refuse(self.request, INACTIVE, f"user {user.get_username()} is deactivated")
            return None
        return user

    def get_user(self, user_id):
        # ModelBackend's: a user deactivated by an operator is signed out at the next request
        # (mozilla-django-oidc's own get_user would keep them signed in).
        return ModelBackend.get_user(self, user_id)
