"""The browser tests' shared parts: Debian's chromium driven by Playwright's sync API, the
real ASGI server (daphne through `mission_weave.runtime.serve`, with Redis) so that the
dashboard's WebSocket works, a real Celery worker for the review pipeline, real SDK
workers (`python -m mission_weave.sdk.worker`) and a screenshot of every page visited.

The database. Playwright's sync API keeps an asyncio loop running in the test's thread
for as long as it is started, and Django refuses ORM calls in a thread with a running
loop (SynchronousOnlyOperation), even though nothing runs concurrently here: the loop
only turns inside a Playwright call, which blocks the test. The `browser` fixture
therefore sets DJANGO_ALLOW_ASYNC_UNSAFE while its module runs and restores it after,
so the tests set up and read the database plainly. The servers are other processes on
the test database: a test using them is transactional (its data committed, visible to
them) and reads what they did from the database or through the pages.

Screenshots go to the folder named by MW_SCREENSHOTS (else a pytest temporary folder),
as <test>-<nn>-<name>.png: one after every document load (named after its path), one
for each explicit `shot(page, name)`, and one of every page still open when the test
ends (`-final`, failed or not)."""

import os
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from apps.bench.harness import server
from mission_weave.protocol import canonical
from tests.integration.celery_worker import celery_worker
from tests.integration.wslive import server_env

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium"),
                             shutil.which("chromium-browser")) if p and os.path.exists(p)), None)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
VIEWPORT = {"width": 1280, "height": 900}
PASSWORD = "pw"  # tests/support.py's humans
# The Agent Card of the SDK workers, and what a contract asks for to be theirs.
CARD = {"version": "1", "capabilities": [{"id": "summarize", "version": "1"}],
        "maxConcurrency": 1}


# --- passwords: quick to make here, and good for the server process too ----------------

class QuickPBKDF2(PBKDF2PasswordHasher):
    """The default PBKDF2 with few iterations. The iterations are in the hash, so the
    server process (default hashers) checks these passwords too; tests/conftest.py's MD5
    hasher is not among its hashers, and a login there would fail."""

    iterations = 1000


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = [f"{__name__}.QuickPBKDF2"]


# --- the browser -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    """One headless chromium per test module (each test gets its own context)."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium); "
                    "Playwright downloads no browser here")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # see the module docstring
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                  args=CHROMIUM_ARGS)
            yield launched
            launched.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory) -> Path:
    named = os.environ.get("MW_SCREENSHOTS")
    folder = Path(named) if named else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Shots:
    """`shot(page, name)`: a full-page PNG <test>-<nn>-<name>.png; returns its path.

    Every document load is photographed too, named after its path (…/missions/m1/ ->
    missions-m1). The load handler only notes the page: Playwright runs handlers inside
    the test's next call to it, where a screenshot would interleave with navigations. The
    noted pages are photographed by `flush()`, which the navigation helpers below
    (`go`, `follow`, `submit`, `sign_in`), every explicit shot and the test's end call."""

    def __init__(self, folder: Path, test: str):
        self.folder, self.test, self.count = folder, _slug(test, 120), 0
        self.taken: list[Path] = []
        self.loaded: list = []  # pages with a load not photographed yet
        self.documents: dict = {}  # page -> the document photographed last (timeOrigin)

    def __call__(self, page, name: str) -> Path | None:
        self.flush()
        return self._take(page, name)

    def _take(self, page, name: str) -> Path | None:
        self.count += 1
        path = self.folder / f"{self.test}-{self.count:02d}-{_slug(name, 60)}.png"
        try:
            page.screenshot(path=str(path), full_page=True)
        except Exception:  # the page closed meanwhile: nothing to keep
            return None
        self.taken.append(path)
        return path

    def on_load(self, page) -> None:
        if page not in self.loaded:
            self.loaded.append(page)

    def flush(self) -> None:
        pending, self.loaded = self.loaded, []
        for page in pending:
            if page.is_closed():
                continue
            document = page.evaluate("performance.timeOrigin")
            if self.documents.get(page) != document:  # each document once
                self.documents[page] = document
                self._take(page, page_name(page.url))


def page_name(url: str) -> str:
    path = urlsplit(url).path.strip("/")
    if re.fullmatch(r"g/[^/]+", path):
        return "group"
    return (re.sub(r"^g/[^/]+/", "", path) or "groups").replace("/", "-")


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:limit] or "page"


@pytest.fixture
def shot(request, screenshot_dir) -> Shots:
    return Shots(screenshot_dir, request.node.name)


@pytest.fixture
def context(browser, shot):
    """A fresh browser context (own cookies) at 1280x900. Every page opened in it accepts
    confirmation dialogs and is photographed after each load, and when the test ends."""
    yield from photographed(browser, shot)


def photographed(browser, shot):
    """The `context` fixture's context; a test with a second person signed in yields a
    second one from here."""
    ctx = browser.new_context(viewport=VIEWPORT)
    ctx.set_default_timeout(10_000)
    ctx.mw_shots = shot  # for the navigation helpers below

    def opened(page):
        page.on("dialog", lambda dialog: dialog.accept())
        page.on("load", shot.on_load)
    ctx.on("page", opened)
    yield ctx
    for page in ctx.pages:
        shot(page, "final")
    ctx.close()


@pytest.fixture
def page(context):
    return context.new_page()


WIDTHS = (1280, 420)


def at_each_width(page, shot, name: str) -> None:
    """Photographed at 1280 and at 420 px wide; at neither does the page scroll sideways."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(150)
        shot(page, f"{name}-{width}")
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= width, f"{name} is {wide} px wide at {width} px"
    page.set_viewport_size(VIEWPORT)


def _loaded(page) -> None:
    """The page's new document has loaded: photograph it (and any other noted page)."""
    shots = getattr(page.context, "mw_shots", None)
    if shots is not None:
        shots.on_load(page)  # its load event may not have been dispatched yet
        shots.flush()


def go(page, url: str) -> None:
    page.goto(url)
    _loaded(page)


def follow(page, selector: str) -> None:
    """Click a link and wait for the page it leads to."""
    with page.expect_navigation(wait_until="load"):
        page.click(selector)
    _loaded(page)


def submit(page, button: str) -> None:
    """Click a form's submit button and wait for the page it leads to (the redirect's)."""
    with page.expect_navigation(wait_until="load"):
        page.click(button)
    _loaded(page)


def reload(page) -> None:
    page.reload()
    _loaded(page)


def g_url(server, group_id: str, path: str = "") -> str:
    return f"{server.url}/g/{group_id}/{path}"


def sign_in(page, base_url: str, username: str, password: str = PASSWORD) -> None:
    """Through the login form, as a person does; lands on the Group list."""
    go(page, f"{base_url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    submit(page, "form.login button[type=submit]")
    assert urlsplit(page.url).path == "/", page.url


def marker(page) -> None:
    """Mark the loaded document; `still_marked` is true until the page is reloaded or
    navigated away (then it is another document): proof that a change arrived live."""
    page.evaluate("window.__mwMarker = 'unchanged document'")


def still_marked(page) -> bool:
    return page.evaluate("window.__mwMarker === 'unchanged document'")


# --- the servers ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LiveServer:
    url: str
    port: int
    data_dir: Path
    env: dict


@pytest.fixture(scope="session")
def mw_data_dir(tmp_path_factory) -> Path:
    """MW_DATA_DIR of the server and the Celery worker: the same blobs, the same keys."""
    return tmp_path_factory.mktemp("mw-e2e")


@pytest.fixture(scope="session")
def authority_env(django_db_setup) -> dict:
    """One authority key for every process (this one signs what the tests set up)."""
    from apps.ledger import signing_keys

    return {"MW_AUTHORITY_KEY": canonical.private_key_b64url(signing_keys.private_key())}


# Package-scoped: the server and the Celery worker work on the test database, so they
# must be gone before the rest of the suite runs (a review task of a later test would
# otherwise be taken by this worker).
@pytest.fixture(scope="package")
def asgi_server(django_db_setup, django_db_blocker, mw_data_dir, authority_env) -> LiveServer:
    """`mission_weave.runtime.serve` (daphne, HTTP and WebSockets) on the test database with Redis,
    as tests/integration/wslive.py live_server() runs it, serving the static files too
    (htmx and the live-update script: without them no page is live)."""
    if not django_settings.REDIS_URL:
        pytest.fail("the browser tests need Redis for the live pages: set REDIS_URL")
    env = {**server_env(), **authority_env, "MW_SERVE_STATIC": "1",
           "MW_DATA_DIR": str(mw_data_dir), "MW_BLOB_ROOT": str(mw_data_dir / "blobs")}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    with server(1, env=env) as port:
        yield LiveServer(f"http://127.0.0.1:{port}", port, mw_data_dir, env)


@pytest.fixture(scope="package")
def review_worker(asgi_server, authority_env):
    """A real Celery worker (tests/integration/celery_worker.py) taking the review tasks the
    server schedules through Redis, on the server's blobs."""
    with celery_worker(asgi_server.data_dir, **authority_env, DJANGO_ALLOW_ASYNC_UNSAFE="",
                       MW_BLOB_ROOT=str(asgi_server.data_dir / "blobs")) as worker:
        yield worker


# --- SDK workers -----------------------------------------------------------------------------

HANDLER = '''"""The e2e worker's handler: reports progress, then holds the item active until the
test releases it (the file $MW_E2E_GO appears), then submits a markdown summary with
Evidence for every criterion."""

import asyncio
import os
from pathlib import Path


async def handle(ctx):
    await ctx.progress("drafting", milestones=["read the contract"],
                       nextCheckpoint="summary written")
    go = Path(os.environ["MW_E2E_GO"])
    for _ in range(1200):
        if go.exists():
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError("the test never released the handler")
    summary = await ctx.publish_artifact(f"# {ctx.contract['goal']}\\n\\nDone.\\n".encode(),
                                         "text/markdown")
    criteria = [c["id"] for c in ctx.contract["acceptanceCriteria"]]
    evidence = ctx.evidence(criteria, method="self-check",
                            result="pass: the summary is written", artifacts=[summary])
    return {"evidence": [evidence], "artifacts": [summary]}
'''


@dataclass
class SdkWorker:
    """One `python -m mission_weave.sdk.worker --once` subprocess and its agent."""

    agent_id: str
    folder: Path
    process: subprocess.Popen | None = None

    @property
    def principal(self) -> str:
        return f"agent:{self.agent_id}"

    def release(self) -> None:
        """Let the handler go on from "drafting" to its submission."""
        (self.folder / "go").touch()

    def log(self) -> str:
        return (self.folder / "stderr.txt").read_text(errors="replace")

    def finish(self, timeout: float = 30) -> tuple[int, str]:
        """Its exit code and what it printed (--once prints the outcome as JSON)."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the SDK worker did not end:\n{self.log()[-3000:]}") from None
        return code, (self.folder / "stdout.txt").read_text()


@pytest.fixture
def sdk_worker(asgi_server, tmp_path):
    """`start(group)`: a new agent with CARD, a worker of `group` (an apps.ledger Group),
    its key file written as `mission_weave.sdk.keys` writes one, running the SDK's worker
    command line against the live server with the handler above. Stopped after the test."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from apps.identity import registry
    from mission_weave.sdk.keys import AgentKey

    started = []

    def start(group, name: str | None = None) -> SdkWorker:
        agent_id = name or f"sdkw-{uuid.uuid4().hex[:8]}"
        folder = tmp_path / agent_id
        folder.mkdir()
        private = Ed25519PrivateKey.generate()
        key = registry.register_agent(agent_id, canonical.public_key_b64url(private), CARD)
        registry.add_member(group, f"agent:{agent_id}", ["worker"])
        key_file = AgentKey(agent_id, key.key_id, private, group.id).save(folder / "key.json")
        (folder / "e2e_handler.py").write_text(HANDLER)
        worker = SdkWorker(agent_id, folder)
        env = {**os.environ, "MW_E2E_GO": str(folder / "go")}
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        worker.process = subprocess.Popen(
            [sys.executable, "-m", "mission_weave.sdk.worker", "--key", str(key_file),
             "--handler", "e2e_handler:handle", "--url", asgi_server.url, "--once"],
            cwd=folder, env=env, stdout=(folder / "stdout.txt").open("w"),
            stderr=(folder / "stderr.txt").open("w"))
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.process.terminate()
            try:
                worker.process.wait(15)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()


def presence_of(agent_id: str) -> dict | None:
    """The agent's last Presence report, as the server stored it (None before the first)."""
    from apps.identity.models import Presence

    return Presence.objects.filter(agent_id=agent_id).values("status", "available_slots").first()
