"""The operators' admin (/admin/): every page renders; the log, its archive and what is
derived from it refuse every edit; Groups and memberships change through the registry,
the code of the mw_* commands, so that membership epochs move as they do there."""

import io

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from apps.artifacts.models import Artifact, ArtifactEdge, Blob, BlobUpload, ContextPackage
from apps.delivery import cursors
from apps.delivery.models import Cursor
from apps.identity import oidc, presence
from apps.identity.models import Agent, AgentKey, AgentSession, Membership, Presence, SessionNonce
from apps.identity.principals import Principal
from apps.ledger import archive, publish, snapshots
from apps.ledger.models import ArchivedEvent, CommandRecord, Event, Group, Snapshot
from apps.work.models import Mission, Proposal, WorkItem
from tests.integration.artifact_helpers import package, published
from tests.support import contract, now

pytestmark = pytest.mark.usefixtures("blob_root")

# Everything but Groups and memberships: the log and what is derived from it, and the
# principals' own records (keys may only be deactivated, by an action).
READ_ONLY = [Event, ArchivedEvent, Snapshot, CommandRecord, Mission, WorkItem, Proposal,
             Artifact, ArtifactEdge, ContextPackage, Blob, BlobUpload, Cursor, Agent,
             AgentKey, AgentSession, SessionNonce, Presence]
OURS = ("identity", "ledger", "work", "artifacts", "delivery")


def url(model, view: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}",
                   args=[quote(arg) for arg in args])


def row(model):
    """The first row of `model`, as the change page shows it, and its column values."""
    obj = model._default_manager.order_by("pk").first()
    assert obj is not None, f"no {model.__name__} to look at"
    return obj, model._default_manager.filter(pk=obj.pk).values().get()


@pytest.fixture
def operator(db):
    user = get_user_model().objects.create_superuser("operator", password="pw")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def busy(scenario):
    """A Group with a row in every table the admin shows."""
    s = scenario
    item_id, _ = s.running()
    first = s.deliver(item_id)
    published(s, item_id, b"# derived\n", sources=[first])
    s.w1.ok("context.publish", package(s.w1, s.mission_id, artifacts=[first]))
    s.w2.ok("work.propose", {"missionId": s.mission_id, "contract": contract()})
    presence.report(s.w1.name, {"availableSlots": 1, "status": "available"}, now())
    cursors.acknowledge(Principal(s.w1.principal), [(s.world.group.id, 1)])
    archive.archive_through(snapshots.take(s.world.group.id, sequence=2))
    oidc.user_for("https://sso.example.com", "sub-1", {"email": "ann@example.com"})
    return s


@pytest.fixture
def notices(monkeypatch):
    """The membership-changed notices to live connections, sent as changes commit (in a
    `committing()` block: the test's transaction never commits)."""
    sent = []
    monkeypatch.setattr(publish, "membership_changed",
                        lambda group_id, principal: sent.append((group_id, principal)))
    return sent


@pytest.fixture
def committing(django_capture_on_commit_callbacks):
    return lambda: django_capture_on_commit_callbacks(execute=True)


def test_every_changelist_and_change_page_renders(busy, operator):
    for model in admin.site._registry:
        assert operator.get(url(model, "changelist")).status_code == 200, model
        if model._meta.app_label in OURS:
            obj, _ = row(model)
            assert operator.get(url(model, "change", obj.pk)).status_code == 200, model


def test_the_log_pages_show_its_json_indented_and_filter_by_type(busy, operator):
    event, _ = row(Event)
    page = operator.get(url(Event, "change", event.pk)).content.decode()
    assert "<pre>{\n" in page

    listed = operator.get(url(Event, "changelist") + "?type=work.started")
    assert [e.type for e in listed.context["cl"].result_list] == ["work.started"]


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda model: model.__name__)
def test_the_admin_refuses_any_edit_of_the_log(busy, operator, model):
    obj, before = row(model)

    assert operator.get(url(model, "add")).status_code == 403
    assert operator.post(url(model, "add"), {}).status_code == 403
    edit = dict.fromkeys(before, "changed")
    assert operator.post(url(model, "change", obj.pk), edit).status_code == 403
    assert operator.get(url(model, "delete", obj.pk)).status_code == 403
    assert operator.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403

    listing = operator.get(url(model, "changelist"))
    assert "delete_selected" not in listing.context["cl"].model_admin.get_actions(
        listing.wsgi_request)
    operator.post(url(model, "changelist"), {"action": "delete_selected",
                                             "_selected_action": [obj.pk], "post": "yes"})
    assert model._default_manager.filter(pk=obj.pk).values().get() == before


def test_a_role_change_moves_the_epoch_as_mw_add_member_does(scenario, operator, notices,
                                                              committing):
    s = scenario
    by_admin = Membership.objects.get(group=s.world.group, principal=s.w1.principal)
    by_command = Membership.objects.get(group=s.world.group, principal=s.w2.principal)

    with committing():
        response = operator.post(url(Membership, "change", by_admin.pk),
                                 {"roles": ["worker", "reviewer"], "active": "on"})
        call_command("mw_add_member", s.world.group.id, s.w2.principal,
                     "--roles=worker,reviewer", stdout=io.StringIO())

    assert response.status_code == 302
    changed, commanded = (Membership.objects.get(pk=m.pk) for m in (by_admin, by_command))
    assert changed.roles == commanded.roles == ["reviewer", "worker"]
    assert (changed.epoch, commanded.epoch) == (by_admin.epoch + 1, by_command.epoch + 1)
    assert notices == [(s.world.group.id, s.w1.principal), (s.world.group.id, s.w2.principal)]
    assert s.w1.membership_epoch == changed.epoch  # what the agent's commands must name


def test_a_change_the_registry_refuses_is_a_form_error_and_saves_nothing(
        scenario, operator, notices, committing):
    member = Membership.objects.get(group=scenario.world.group,
                                    principal=scenario.w1.principal)

    with committing():
        response = operator.post(url(Membership, "change", member.pk), {"active": "on"})

    assert response.status_code == 200
    assert "roles must be among coordinator, worker" in response.content.decode()
    after = Membership.objects.get(pk=member.pk)
    assert (after.roles, after.epoch, after.active) == (["worker"], member.epoch, True)
    assert notices == []


def test_admitting_a_member_goes_through_the_registry(scenario, operator):
    s = scenario
    get_user_model().objects.create_user("reviewer-human", password="pw")
    form = {"group": s.world.group.pk, "principal": "user:reviewer-human",
            "roles": ["reviewer"]}

    assert operator.post(url(Membership, "add"), form).status_code == 302
    unknown = operator.post(url(Membership, "add"), {**form, "principal": "agent:nobody"})

    member = Membership.objects.get(group=s.world.group, principal="user:reviewer-human")
    assert (member.roles, member.epoch, member.active) == (["reviewer"], 1, True)
    assert "no agent nobody is registered" in unknown.content.decode()
    assert not Membership.objects.filter(principal="agent:nobody").exists()


def test_removing_a_member_clears_active_and_moves_the_epoch(scenario, operator, notices,
                                                             committing):
    s = scenario
    members = {actor.principal: Membership.objects.get(group=s.world.group,
                                                       principal=actor.principal)
               for actor in (s.w1, s.w2)}

    with committing():
        action = operator.post(url(Membership, "changelist"), {
            "action": "remove_from_group", "_selected_action": [members[s.w1.principal].pk]})
        unticked = operator.post(url(Membership, "change", members[s.w2.principal].pk),
                                 {"roles": ["worker"]})

    assert (action.status_code, unticked.status_code) == (302, 302)
    for _principal, before in members.items():
        after = Membership.objects.get(pk=before.pk)
        assert (after.active, after.epoch, after.roles) == (False, before.epoch + 1,
                                                            before.roles)
    assert sorted(notices) == sorted((s.world.group.id, p) for p in members)
    assert operator.get(url(Membership, "delete", members[s.w1.principal].pk)).status_code \
        == 403


def test_a_group_is_created_through_the_registry_and_never_edited(scenario, operator):
    created = operator.post(url(Group, "add"), {"slug": "ops", "name": "Operations"})
    refused = operator.post(url(Group, "add"), {"slug": "-ops", "name": ""})
    group = scenario.world.group
    edit = operator.post(url(Group, "change", group.pk), {"slug": "moved", "name": "x"})

    assert created.status_code == 302
    assert Group.objects.filter(id="grp_ops", slug="ops", name="Operations").exists()
    assert "group slug" in refused.content.decode()
    assert not Group.objects.filter(slug="-ops").exists()
    assert edit.status_code == 403
    assert Group.objects.get(pk=group.pk).slug == group.slug
    assert operator.get(url(Group, "delete", group.pk)).status_code == 403


def test_a_deactivated_key_signs_nothing_more(scenario, operator):
    s = scenario
    key = AgentKey.objects.get(key_id=s.w1.key_id)

    operator.post(url(AgentKey, "changelist"), {"action": "deactivate",
                                                "_selected_action": [key.pk]})

    assert not AgentKey.objects.get(pk=key.pk).active
    assert s.w1.open_session().json()["error"]["code"] == "INVALID_SIGNATURE"


def test_a_session_page_never_shows_the_whole_token_hash(scenario, operator):
    session = AgentSession.objects.filter(agent_id=scenario.w1.name).get()

    page = operator.get(url(AgentSession, "change", session.pk)).content.decode()

    assert session.token_hash[:15] in page
    assert session.token_hash not in page


def test_a_non_staff_user_cannot_open_the_admin(scenario):
    response = scenario.owner.client.get("/admin/")

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert scenario.owner.client.get(url(Event, "changelist")).status_code == 302


def test_the_demo_operator_may_open_the_admin(db, settings, tmp_path):
    settings.MW_DATA_DIR = tmp_path  # the demo writes its agents' keys there
    call_command("mw_demo", stdout=io.StringIO())
    client = Client()

    assert client.login(username="admin", password="admin")
    assert client.get("/admin/").status_code == 200



def test_every_row_is_named_by_what_it_is_never_model_object_n(busy, operator):
    for model in admin.site._registry:
        pages = [operator.get(url(model, "changelist")).content.decode()]
        if model._meta.app_label in OURS:
            obj, _ = row(model)
            pages.append(operator.get(url(model, "change", obj.pk)).content.decode())
        for page in pages:
            assert " object (" not in page, (model, page[page.find(" object (") - 200:][:300])

    mission = Mission.objects.get(mission_id=busy.mission_id)
    item = WorkItem.objects.filter(mission_id=busy.mission_id).first()
    member = Membership.objects.get(group=busy.world.group, principal=busy.w1.principal)
    assert str(mission) == f"Q3 review ({busy.mission_id})"
    assert str(item) == f"{item.work_item_id}: {contract()['goal']}"
    assert str(busy.world.group) == busy.world.group.slug
    assert str(member) == f"{busy.w1.principal} in {busy.world.group.id}"
    for obj in (mission, item, member):
        page = operator.get(url(type(obj), "change", obj.pk)).content.decode()
        assert f"<h2>{escape(str(obj))}</h2>" in page, obj
