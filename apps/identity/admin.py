"""The operators' admin over principals: Groups, Agents and their keys, sessions and
memberships. Groups and memberships change only through apps/identity/registry.py, the
code the mw_* commands run, so that a membership's epoch moves on every change."""

from django import forms
from django.contrib import admin, messages

from apps.ledger.admin import ReadOnlyModelAdmin
from apps.ledger.models import Group
from mission_weave.protocol.errors import ProtocolError

from . import registry
from .models import (
    Agent,
    AgentKey,
    AgentSession,
    Membership,
    OidcIdentity,
    Presence,
    SessionNonce,
)


class RegistryForm(forms.ModelForm):
    """A form whose change the registry makes (its `apply`), as the last step of
    validation: so a refusal is shown as a form error and nothing is saved. The admin
    view's transaction holds the change until its response."""

    def full_clean(self):
        super().full_clean()
        if self.is_bound and not self.errors:
            try:
                self.instance = self.apply()
            except ProtocolError as error:
                self.add_error(None, error.message)


class RegistryAdmin(admin.ModelAdmin):
    def save_model(self, request, obj, form, change):
        """Nothing to save: the form made the change through the registry."""


class GroupForm(RegistryForm):
    class Meta:
        model = Group
        fields = ("slug", "name")

    def apply(self):
        group, _ = registry.create_group(self.instance.slug, self.instance.name)
        return group


@admin.register(Group)
class GroupAdmin(RegistryAdmin):
    """Created as mw_create_group creates them; never edited (its id and head are the
    log's) nor deleted (the log keeps it)."""

    form = GroupForm
    list_display = ("slug", "id", "name", "head_sequence", "online_floor", "created_at")
    search_fields = ("slug", "id", "name")
    ordering = ("slug",)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("slug", "name")
        return ("id", "slug", "name", "head_sequence", "head_hash", "online_floor",
                "created_at")

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class MembershipForm(RegistryForm):
    # Not required here, so that add_member's own refusal explains an empty choice.
    roles = forms.MultipleChoiceField(choices=[(role, role) for role in Membership.ROLES],
                                      required=False, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = Membership
        fields = ("group", "principal", "roles", "active")
        help_texts = {"principal": "agent:<id> or user:<username>",
                      "active": "Clearing it removes the member from the Group (its roles "
                                "stay as they were)."}

    def apply(self):
        member = self.instance  # holds the form's values by now
        if not member.active:
            registry.remove_member(member.group, member.principal)
            member.refresh_from_db()
            return member
        return registry.add_member(member.group, member.principal, member.roles)


@admin.register(Membership)
class MembershipAdmin(RegistryAdmin):
    """Admitted, changed and removed as mw_add_member does; a row is never deleted, so
    that a removed member's epoch goes on growing if it is admitted again."""

    form = MembershipForm
    list_display = ("principal", "group", "roles", "epoch", "active", "updated_at")
    list_filter = ("active", "group")
    list_select_related = ("group",)
    search_fields = ("principal",)
    ordering = ("group_id", "principal")
    actions = ("remove_from_group",)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("group", "principal", "roles")
        return ("group", "principal", "roles", "active", "epoch", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("group", "principal", "epoch", "updated_at")

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Remove from the Group", permissions=("change",))
    def remove_from_group(self, request, queryset):
        members = list(queryset.select_related("group"))
        for member in members:
            registry.remove_member(member.group, member.principal)
        self.message_user(request, f"Removed {len(members)} member(s) from their Group.",
                          messages.SUCCESS)


@admin.register(Agent)
class AgentAdmin(ReadOnlyModelAdmin):
    """Registered and given cards by mw_register_agent, which checks them."""

    list_display = ("id", "session_epoch", "created_at")
    search_fields = ("id",)
    ordering = ("id",)


@admin.register(AgentKey)
class AgentKeyAdmin(ReadOnlyModelAdmin):
    """Keys are added by mw_register_agent. An operator may revoke one (a lost or leaked
    key), as `mw_register_agent AGENT --revoke-key KEYID` does: from then on nothing
    signed with it verifies, neither a command nor a session request, and the sessions
    it opened end."""

    list_display = ("key_id", "agent", "active", "created_at", "revoked_at")
    list_filter = ("active",)
    search_fields = ("key_id", "agent__id")
    ordering = ("agent_id", "key_id")
    actions = ("deactivate",)

    @admin.action(description="Revoke the selected keys (their sessions end)")
    def deactivate(self, request, queryset):
        keys = list(queryset.filter(revoked_at=None).values_list("agent_id", "key_id"))
        ended = sum(registry.revoke_key(agent_id, key_id)[1] for agent_id, key_id in keys)
        self.message_user(request, f"Revoked {len(keys)} key(s); {ended} session(s) ended.",
                          messages.SUCCESS)


@admin.register(AgentSession)
class AgentSessionAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "agent", "epoch", "key_id", "created_at", "expires_at",
                    "superseded_at")
    list_select_related = ("agent",)
    search_fields = ("=id", "=agent__id")
    ordering = ("-created_at",)
    fields = ("id", "agent", "epoch", "key_id", "token", "created_at", "expires_at",
              "superseded_at")

    @admin.display(description="token hash")
    def token(self, session):
        # Enough to tell two sessions apart, never the whole hash.
        return f"{session.token_hash[:15]}…"


@admin.register(SessionNonce)
class SessionNonceAdmin(ReadOnlyModelAdmin):
    list_display = ("nonce", "agent", "used_at")
    search_fields = ("=nonce", "=agent__id")
    ordering = ("-id",)  # newest first, along the primary key


@admin.register(Presence)
class PresenceAdmin(ReadOnlyModelAdmin):
    list_display = ("agent", "status", "available_slots", "reported_at")
    list_filter = ("status",)
    search_fields = ("agent__id",)
    ordering = ("agent_id",)


@admin.register(OidcIdentity)
class OidcIdentityAdmin(ReadOnlyModelAdmin):
    """Who signed in through the OpenID provider as which user (apps/identity/oidc.py makes
    these at a first sign-in). Read-only: relinking a (issuer, sub) to another user would
    hand that user's Groups to whoever signs in as it."""

    list_display = ("subject", "user", "email", "issuer", "created_at", "last_sign_in_at")
    search_fields = ("=subject", "user__username", "email")
    ordering = ("-id",)
