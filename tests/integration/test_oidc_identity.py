"""Sign-in with OpenID Connect, the parts below the browser: apps/identity/oidc.py's mapping
of (issuer, sub) to one user and its checks of the ID token, and the sign-in views with
OIDC off and on (the provider unreachable: a closed port). The whole flow against a real
provider in Chromium is tests/e2e/test_oidc_sign_in.py."""

import os
import re
import socket
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.identity import registry
from apps.identity.models import OidcIdentity
from apps.identity.oidc import Refused, checked_claims, user_for, username_for

pytestmark = pytest.mark.django_db

ISSUER = "https://sso.example.com/realms/acme"
OTHER = "https://login.example.org"
CLAIMS = {"email": "dana@example.com", "email_verified": True, "given_name": "Dana",
          "family_name": "Diaz", "preferred_username": "dana"}
PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,149}")  # core/schemas.py's user:<name>


def reloaded(user):
    return get_user_model().objects.get(pk=user.pk)


def test_one_user_per_issuer_and_subject_whatever_the_email_and_name_become():
    first = user_for(ISSUER, "42", CLAIMS)
    again = user_for(ISSUER, "42", {**CLAIMS, "email": "dana.diaz@example.com",
                                     "preferred_username": "ddiaz", "family_name": "Diaz-Ruiz"})
    elsewhere = user_for(OTHER, "42", CLAIMS)  # the same sub at another provider

    assert again.pk == first.pk and again.username == first.username
    assert (again.email, again.first_name, again.last_name) == ("dana.diaz@example.com", "Dana",
                                                                "Diaz-Ruiz")
    assert elsewhere.pk != first.pk and elsewhere.username != first.username
    assert OidcIdentity.objects.filter(subject="42").count() == 2
    assert first.username.startswith("dana-") and not first.has_usable_password()


def test_a_local_account_with_the_same_email_or_name_is_never_linked():
    local = registry.create_user("dana", "local-pw")
    local.email = CLAIMS["email"]
    local.save()
    # Even the name the first sign-in would take, held by a local account.
    taken = registry.create_user(username_for(ISSUER, "7", CLAIMS), "other-pw")

    mapped = user_for(ISSUER, "7", CLAIMS)

    assert mapped.pk not in (local.pk, taken.pk)
    assert mapped.username == f"{taken.username}-2"
    assert reloaded(local).check_password("local-pw") and reloaded(taken).check_password("other-pw")
    assert not OidcIdentity.objects.filter(user__in=[local, taken]).exists()


def test_the_username_fits_the_principal_pattern_whatever_the_claims():
    names = [username_for(ISSUER, "s", claims) for claims in (
        {}, {"preferred_username": "--Ünïcode Näme!!"}, {"email": "Eve.X@example.com"},
        {"name": "a" * 400}, {"preferred_username": "   ", "name": "Zoë"})]

    assert all(PRINCIPAL.fullmatch(name) for name in names), names
    assert [name.rsplit("-", 1)[0] for name in names] == [
        "user", "unicode-name", "eve.x", "a" * 40, "zoe"]
    assert username_for(ISSUER, "s", {}) != username_for(OTHER, "s", {})


def test_an_unverified_email_is_not_kept_and_one_set_here_stays():
    unverified = user_for(ISSUER, "9", {**CLAIMS, "email_verified": "false"})
    verified = user_for(ISSUER, "9", CLAIMS)
    verified.email = "dana@home.example"  # chosen on the Notifications page
    verified.save()
    later = user_for(ISSUER, "9", {**CLAIMS, "email": "dana@new.example"})

    assert unverified.email == ""
    assert verified.pk == unverified.pk
    assert later.email == "dana@home.example"
    assert OidcIdentity.objects.get(subject="9").email == "dana@new.example"


def test_the_id_token_must_be_this_providers_for_this_client():
    good = {"iss": ISSUER, "aud": "mw", "exp": 1, "sub": "42"}
    bad = [{**good, "iss": OTHER}, {**good, "iss": None}, {**good, "aud": "another-client"},
           {**good, "aud": ["mw", "another-client"]},
           {key: value for key, value in good.items() if key != "exp"},
           {**good, "sub": ""}, {**good, "sub": "x" * 256}, {**good, "sub": 42}]

    assert checked_claims(good, ISSUER, "mw") == "42"
    assert checked_claims({**good, "aud": ["mw", "api"], "azp": "mw"}, ISSUER, "mw") == "42"
    assert checked_claims({**good, "iss": f"{ISSUER}/"}, ISSUER, "mw") == "42"
    for payload in bad:
        with pytest.raises(Refused) as refused:
            checked_claims(payload, ISSUER, "mw")
        assert refused.value.reason == "token"


def test_with_oidc_off_there_is_no_button_and_no_oidc_pages():
    client = Client()

    assert 'id="sign-in-oidc"' not in client.get("/login/").content.decode()
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=c&state=s").status_code == 404


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def oidc_on(settings):
    """OIDC configured, at a provider that does not answer (nothing listens on its port)."""
    issuer = f"http://127.0.0.1:{closed_port()}"
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = "mw", "s3cret-not-logged"
    settings.OIDC_OP_ISSUER, settings.OIDC_PROVIDER_NAME = issuer, "Acme SSO"
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = f"{issuer}/auth"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{issuer}/token"
    settings.OIDC_OP_USER_ENDPOINT = f"{issuer}/me"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{issuer}/jwks"
    settings.AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend",
                                        "apps.identity.oidc.OidcBackend"]
    return issuer


def test_the_sign_in_goes_to_the_provider_with_state_nonce_and_pkce(oidc_on):
    client = Client()
    login = client.get("/login/").content.decode()
    started = client.get("/oidc/authenticate/?next=/g/grp_x/")
    query = parse_qs(urlsplit(started["Location"]).query)
    pending = client.session["oidc_states"]

    assert "Sign in with Acme SSO" in login and 'name="password"' in login
    assert started.status_code == 302 and started["Location"].startswith(f"{oidc_on}/auth?")
    assert query["client_id"] == ["mw"] and query["response_type"] == ["code"]
    assert query["scope"] == ["openid email profile"]
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    assert list(pending) == query["state"]
    assert pending[query["state"][0]]["nonce"] == query["nonce"][0]
    assert client.session["oidc_login_next"] == "/g/grp_x/"


def test_an_unreachable_provider_is_a_refusal_not_a_500(oidc_on, caplog):
    client = Client()
    state = parse_qs(urlsplit(client.get("/oidc/authenticate/")["Location"]).query)["state"][0]

    answer = client.get(f"/oidc/callback/?code=a-code&state={state}")
    page = client.get(answer["Location"])
    replayed = client.get(f"/oidc/callback/?code=a-code&state={state}")  # the state is spent

    assert answer.status_code == 302
    assert answer["Location"] == "/login/refused/?reason=unreachable"
    assert page.status_code == 403 and "did not answer" in page.content.decode()
    assert replayed["Location"] == "/login/refused/?reason=state"
    assert "_auth_user_id" not in client.session
    assert "s3cret-not-logged" not in caplog.text and "a-code" not in caplog.text


def test_an_answer_from_another_issuer_is_refused_before_the_code_is_used(oidc_on):
    client = Client()
    state = parse_qs(urlsplit(client.get("/oidc/authenticate/")["Location"]).query)["state"][0]

    answer = client.get(f"/oidc/callback/?code=c&state={state}&iss=https://evil.example")

    assert answer["Location"] == "/login/refused/?reason=issuer"
    assert state not in client.session["oidc_states"]


def test_local_passwords_still_sign_in_and_oidc_users_have_none(oidc_on):
    registry.create_user("olga", "olga-password")
    mapped = user_for(oidc_on, "sub-1", {"preferred_username": "olga"})
    client = Client()

    local = client.post("/login/", {"username": "olga", "password": "olga-password"})
    signed_in_as = client.session.get("_auth_user_id")
    client.logout()
    oidc_user = client.post("/login/", {"username": mapped.username, "password": ""})

    assert local.status_code == 302 and local["Location"] == "/"
    assert signed_in_as == str(get_user_model().objects.get(username="olga").pk)
    assert oidc_user.status_code == 200 and "_auth_user_id" not in client.session


def test_the_refused_page_says_only_known_reasons_and_error_codes():
    page = Client().get("/login/refused/?reason=<b>x</b>&error=<script>alert(1)</script>")
    text = page.content.decode()

    assert page.status_code == 403
    assert "The sign-in did not succeed." in text and 'data-reason="failed"' in text
    assert "<script>alert" not in text and "&lt;script" not in text
    assert 'href="/login/"' in text


def test_settings_refuse_a_half_configured_oidc():
    env = {**os.environ, "OIDC_RP_CLIENT_ID": "mw", "OIDC_OP_ISSUER": "https://sso.example.com"}
    for name in ("OIDC_RP_CLIENT_SECRET", "OIDC_OP_AUTHORIZATION_ENDPOINT",
                 "OIDC_OP_TOKEN_ENDPOINT", "OIDC_OP_USER_ENDPOINT", "OIDC_OP_JWKS_ENDPOINT"):
        env.pop(name, None)

    result = subprocess.run([sys.executable, "-c", "import mission_weave.settings"], env=env,
                            capture_output=True, text=True, timeout=60)

    assert result.returncode != 0
    assert ("needs OIDC_RP_CLIENT_SECRET, OIDC_OP_AUTHORIZATION_ENDPOINT, OIDC_OP_TOKEN_ENDPOINT, "
            "OIDC_OP_USER_ENDPOINT, OIDC_OP_JWKS_ENDPOINT too") in result.stderr
