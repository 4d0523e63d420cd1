"""Sign-in with OpenID Connect, end to end: a real OpenID provider (`oidc-provider` on Node,
tests/e2e/oidc_provider/provider.js, installed by `make test` with npm ci), the server
with OIDC_* set, and Chromium through the whole redirect flow: our login page, the
provider's login and consent pages, our callback, the "No Group yet" page, the operator's
`mw_add_member`, the Group. Then what must be refused: an answer with a forged state, an
answer in a browser that started no sign-in, a sign-in cancelled at the provider; and
what must not happen: a sign-in linked to a local account because the e-mail matches.

The provider listens on localhost and the server on 127.0.0.1: two hosts, two cookie jars,
as with a real provider. The server's port is chosen first, since its callback is the
client's redirect URI at the provider."""

import io
import json
import os
import secrets
import select
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from playwright.sync_api import expect

from apps.bench.harness import ServerProcess, free_port, start_server, stop_server
from apps.identity import registry
from apps.identity.models import Membership, OidcIdentity
from tests.e2e.conftest import at_each_width, go, photographed, reload, submit
from tests.integration.wslive import server_env

pytestmark = pytest.mark.django_db(transaction=True)

PROVIDER_DIR = Path(__file__).parent / "oidc_provider"
CLIENT_ID = "missionweave-e2e"
PROVIDER_NAME = "Test IdP"
ACCOUNTS = {
    "alice": {"password": "alice-at-the-idp", "sub": "248289761001", "email": "alice@example.com",
              "email_verified": True, "name": "Alice Archer", "given_name": "Alice",
              "family_name": "Archer", "preferred_username": "alice"},
    # The same e-mail and name as the local account `carol` below.
    "carol": {"password": "carol-at-the-idp", "sub": "carol|77", "email": "carol@example.com",
              "email_verified": True, "name": "Carol C", "preferred_username": "carol"},
}


@dataclass
class Provider:
    issuer: str
    rp_port: int
    client_secret: str
    accounts: Path
    process: subprocess.Popen

    def set_account(self, login: str, **claims) -> None:
        """Change what the provider says of an account (it reads the file at each sign-in)."""
        accounts = json.loads(self.accounts.read_text())
        accounts[login].update(claims)
        self.accounts.write_text(json.dumps(accounts))


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    node = shutil.which("node")
    if node is None or not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.fail("the OIDC sign-in test needs Node.js and the oidc-provider package: "
                    "`make test` installs it (npm ci in tests/e2e/oidc_provider); by hand: "
                    "apt-get install nodejs npm && npm ci --prefix tests/e2e/oidc_provider")
    folder = tmp_path_factory.mktemp("oidc-provider")
    accounts = folder / "accounts.json"
    accounts.write_text(json.dumps(ACCOUNTS))
    rp_port, secret = free_port(), secrets.token_urlsafe(24)
    env = {**os.environ, "MW_OIDC_CLIENT_ID": CLIENT_ID, "MW_OIDC_CLIENT_SECRET": secret,
           "MW_OIDC_REDIRECT_URI": f"http://127.0.0.1:{rp_port}/oidc/callback/",
           "MW_OIDC_ACCOUNTS": str(accounts)}
    log = (folder / "stderr.txt").open("w")
    process = subprocess.Popen([node, "provider.js"], cwd=PROVIDER_DIR, env=env,
                               stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 30)
        line = process.stdout.readline() if ready else ""
        if not line:
            pytest.fail(f"the OpenID provider did not start:\n"
                        f"{(folder / 'stderr.txt').read_text()[-3000:]}")
        yield Provider(json.loads(line)["issuer"], rp_port, secret, accounts, process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@dataclass
class OidcServer:
    url: str
    process: ServerProcess

    def log(self) -> str:
        """What the server has logged so far (its stderr). Read through a file description
        of our own: seeking the shared one would move where the server writes."""
        return Path(f"/proc/self/fd/{self.process.log.fileno()}").read_bytes().decode(
            errors="replace")


@pytest.fixture(scope="module")
def oidc_server(django_db_setup, authority_env, provider, tmp_path_factory) -> OidcServer:
    """The server with sign-in through the provider, configured as docs/operations.md tells
    an operator: the endpoints from `mw_oidc_discover`, the rest from the environment."""
    discovered = io.StringIO()
    call_command("mw_oidc_discover", provider.issuer, stdout=discovered)
    data_dir = tmp_path_factory.mktemp("mw-oidc")
    env = {**server_env(), **authority_env, **json.loads(discovered.getvalue()),
           "MW_SERVE_STATIC": "1", "MW_DATA_DIR": str(data_dir),
           "MW_BLOB_ROOT": str(data_dir / "blobs"), "OIDC_RP_CLIENT_ID": CLIENT_ID,
           "OIDC_RP_CLIENT_SECRET": provider.client_secret, "OIDC_PROVIDER_NAME": PROVIDER_NAME}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    process = start_server(provider.rp_port, 1, env)
    try:
        yield OidcServer(f"http://127.0.0.1:{process.port}", process)
    finally:
        stop_server(process)


@pytest.fixture(autouse=True)
def no_server_error(oidc_server):
    """Whatever a test does, the server answers it without an error of its own."""
    before = len(oidc_server.log())
    yield
    logged = oidc_server.log()[before:]
    assert "Traceback" not in logged and " ERROR " not in logged, logged[-4000:]


def sign_in_at_provider(page, base_url: str, login: str, shot) -> None:
    """From our login page through the provider's pages, back at our home page."""
    go(page, f"{base_url}/")
    expect(page).to_have_url(f"{base_url}/login/?next=/")
    page.click("#sign-in-oidc")
    page.wait_for_selector("form.idp-login")
    assert urlsplit(page.url).hostname == "localhost"  # at the provider
    shot(page, "provider-login")
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", ACCOUNTS[login]["password"])
    page.click("form.idp-login button[type=submit]")
    page.wait_for_selector("form.idp-consent")
    shot(page, "provider-consent")
    submit(page, "form.idp-consent button[type=submit]")
    expect(page).to_have_url(f"{base_url}/")


def signed_out(page, base_url: str) -> None:
    """No session: the home page sends the browser to the login page."""
    go(page, f"{base_url}/")
    expect(page).to_have_url(f"{base_url}/login/?next=/")


def test_a_person_signs_in_through_the_provider_and_an_operator_grants_a_group(
        oidc_server, provider, browser, shot):
    base = oidc_server.url
    group, _ = registry.create_group("oidc-e2e", "Sign-in team")
    users_before = get_user_model().objects.count()

    first = photographed(browser, shot)
    page = next(first).new_page()
    go(page, f"{base}/login/")
    expect(page.locator("#sign-in-oidc")).to_have_text(f"Sign in with {PROVIDER_NAME}")
    expect(page.locator("form.login input[name=password]")).to_be_visible()  # local stays
    at_each_width(page, shot, "login")

    sign_in_at_provider(page, base, "alice", shot)
    identity = OidcIdentity.objects.select_related("user").get(
        issuer=provider.issuer, subject=ACCOUNTS["alice"]["sub"])
    user = identity.user
    expect(page.locator("h1")).to_have_text("No Group yet")
    expect(page.locator("#principal")).to_have_text(f"user:{user.username}")
    expect(page.locator("#identity")).to_contain_text("alice@example.com")
    expect(page.locator("#identity")).to_contain_text(ACCOUNTS["alice"]["sub"])
    at_each_width(page, shot, "no-group")
    assert user.username.startswith("alice-") and not user.has_usable_password()
    assert (user.email, user.first_name, user.last_name) == ("alice@example.com", "Alice",
                                                             "Archer")
    assert get_user_model().objects.count() == users_before + 1

    call_command("mw_add_member", group.id, f"user:{user.username}", roles="owner")
    reload(page)
    expect(page.locator("#groups")).to_contain_text("Sign-in team")
    at_each_width(page, shot, "granted")
    submit(page, "form.logout button[type=submit]")
    signed_out(page, base)
    next(first, None)

    # She changes e-mail and name at the provider; a new browser, a new provider session.
    provider.set_account("alice", email="alice.archer@example.org", name="Alice Archer-Smith",
                         family_name="Archer-Smith", preferred_username="aarcher")
    second = photographed(browser, shot)
    page = next(second).new_page()
    sign_in_at_provider(page, base, "alice", shot)
    expect(page.locator("#groups")).to_contain_text("Sign-in team")
    expect(page.locator(".who")).to_contain_text(f"user:{user.username}")
    again = get_user_model().objects.get(pk=user.pk)
    assert again.username == user.username  # the same user, the same memberships
    assert (again.email, again.last_name) == ("alice.archer@example.org", "Archer-Smith")
    assert get_user_model().objects.count() == users_before + 1
    logged = oidc_server.log()
    assert f"first sign-in of {ACCOUNTS['alice']['sub']}" in logged
    assert provider.client_secret not in logged
    next(second, None)


def test_an_e_mail_shared_with_a_local_account_links_nothing(oidc_server, provider, page,
                                                             shot):
    base = oidc_server.url
    group, _ = registry.create_group("carols", "Carol's Group")
    local = registry.create_user("carol", "local-password")
    local.email = "carol@example.com"
    local.save()
    registry.add_member(group, "user:carol", ["owner"])

    sign_in_at_provider(page, base, "carol", shot)
    expect(page.locator("h1")).to_have_text("No Group yet")  # not carol's Group
    mapped = OidcIdentity.objects.get(issuer=provider.issuer, subject="carol|77").user
    expect(page.locator("#principal")).to_have_text(f"user:{mapped.username}")
    at_each_width(page, shot, "collision")
    assert mapped.pk != local.pk and mapped.username.startswith("carol-")
    assert mapped.email == "carol@example.com"
    assert not Membership.objects.filter(principal=f"user:{mapped.username}").exists()
    assert get_user_model().objects.get(pk=local.pk).check_password("local-password")


def test_a_forged_state_is_refused_and_signs_nobody_in(oidc_server, provider, page, shot):
    base = oidc_server.url
    users_before = get_user_model().objects.count()

    # A sign-in under way (its state in the session), then an answer it did not start.
    go(page, f"{base}/login/")
    page.click("#sign-in-oidc")
    page.wait_for_selector("form.idp-login")
    go(page, f"{base}/oidc/callback/?code=forged-code&state=forged-state")
    expect(page).to_have_url(f"{base}/login/refused/?reason=state")
    expect(page.locator("h1")).to_have_text("Sign-in refused")
    expect(page.locator("#sign-in-refused")).to_contain_text("did not belong to a sign-in")
    expect(page.locator("#back-to-sign-in")).to_have_attribute("href", "/login/")
    at_each_width(page, shot, "refused-state")
    signed_out(page, base)

    # A browser that started no sign-in at all.
    page.context.clear_cookies()
    go(page, f"{base}/oidc/callback/?code=forged-code&state=forged-state")
    expect(page.locator("#sign-in-refused")).to_have_attribute("data-reason", "no_sign_in")
    signed_out(page, base)
    assert get_user_model().objects.count() == users_before


def test_a_sign_in_cancelled_at_the_provider_is_refused(oidc_server, provider, page, shot):
    base = oidc_server.url
    go(page, f"{base}/login/")
    page.click("#sign-in-oidc")
    page.wait_for_selector("form.idp-login")
    with page.expect_navigation(url=f"{base}/login/refused/**"):
        page.click("#idp-cancel")
    expect(page.locator("#sign-in-refused")).to_have_attribute("data-reason", "cancelled")
    expect(page.locator("#sign-in-refused")).to_contain_text("access_denied")
    shot(page, "refused-cancelled")
    signed_out(page, base)


def test_mw_oidc_discover_refuses_a_document_of_another_issuer(provider):
    # The same provider, asked by another name than its issuer's (127.0.0.1, not localhost).
    other_name = provider.issuer.replace("//localhost:", "//127.0.0.1:")
    printed = io.StringIO()

    call_command("mw_oidc_discover", provider.issuer, "--env", stdout=printed)
    with pytest.raises(CommandError) as refused:
        call_command("mw_oidc_discover", other_name)

    assert f"OIDC_OP_JWKS_ENDPOINT={provider.issuer}/jwks" in printed.getvalue().splitlines()
    assert f"says its issuer is '{provider.issuer}'" in str(refused.value)
