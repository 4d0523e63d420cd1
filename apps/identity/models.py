"""Principals: Agents with Ed25519 keys and Agent Cards, their sessions, and Group
memberships (agents and human users alike)."""

from django.db import models


class Agent(models.Model):
    id = models.CharField(primary_key=True, max_length=100)
    card = models.JSONField(default=dict)  # {version, capabilities:[{id, version}], maxConcurrency}
    # Every version its Agent Card has had, oldest first, the current one last: a manifest
    # names one of them as its agentCardVersion (§13.1; registry.register_agent keeps it).
    card_versions = models.JSONField(default=list)
    session_epoch = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.id


class AgentKey(models.Model):
    key_id = models.CharField(primary_key=True, max_length=120)  # <agentId>#<n>
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    public_key = models.CharField(max_length=64)  # raw 32 bytes, base64url
    active = models.BooleanField(default=True)  # False once revoked: signs nothing more
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)  # registry.revoke_key

    def __str__(self):
        return self.key_id


class AgentSession(models.Model):
    """PROTOCOL §1: one live session per Agent; the bearer token is stored hashed."""

    id = models.CharField(primary_key=True, max_length=100)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    epoch = models.PositiveIntegerField()
    # The key that signed the session request: revoking it ends the session. Null for
    # sessions opened before keys were recorded (revoking any key of the agent ends them).
    key_id = models.CharField(max_length=120, null=True, blank=True)
    token_hash = models.CharField(max_length=71, unique=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    superseded_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "epoch"],
                                               name="session_epoch_unique")]

    def __str__(self):
        return f"{self.agent_id} session {self.epoch}"


class SessionNonce(models.Model):
    """A nonce may open a session once (PROTOCOL §1)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE)
    nonce = models.CharField(max_length=200)
    used_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "nonce"], name="nonce_once")]

    def __str__(self):
        return f"{self.agent_id} nonce {self.nonce}"


class Membership(models.Model):
    """A principal's roles in one Group; the epoch grows on every change."""

    ROLES = ("coordinator", "worker", "reviewer", "owner", "observer")

    group = models.ForeignKey("ledger.Group", on_delete=models.CASCADE, related_name="members")
    principal = models.CharField(max_length=200)  # agent:<id> | user:<username>
    roles = models.JSONField(default=list)
    epoch = models.PositiveIntegerField(default=1)
    active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "principal"],
                                               name="membership_unique")]

    def __str__(self):
        return f"{self.principal} in {self.group_id}"


class Presence(models.Model):
    """An Agent's last capacity report (POST /api/v1/presence, §11.1). Not part of any
    Group's log: a hint for offer ranking, counted as unknown once older than
    MW_PRESENCE_TTL_SECONDS."""

    STATUSES = ("available", "busy", "offline")

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, primary_key=True,
                                 related_name="presence")
    available_slots = models.PositiveIntegerField()
    status = models.CharField(max_length=20)
    reported_at = models.DateTimeField()

    def __str__(self):
        return f"{self.agent_id}: {self.status}, {self.available_slots} slots"


class OidcIdentity(models.Model):
    """A person who signs in through an OpenID provider (apps/identity/oidc.py): the
    provider's (issuer, sub), the one pair OpenID Connect promises never changes nor is
    given to anyone else, and the Django user it maps to. The e-mail and the name may
    change at the provider; this row does not, so neither does the user (nor its
    `user:<username>` memberships)."""

    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)  # `sub`: at most 255 ASCII characters
    user = models.OneToOneField("auth.User", on_delete=models.CASCADE,
                                related_name="oidc_identity")
    # The verified e-mail the provider gave at the last sign-in: the user's address follows
    # the provider's while it is still this one (one the person set here stays).
    email = models.EmailField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"],
                                               name="oidc_identity_once")]

    def __str__(self):
        return f"{self.subject} at {self.issuer}"
