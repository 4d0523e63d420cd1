from django.urls import path

from apps.api.urls import IdConverter  # noqa: F401 - registers the `id` path converter

from . import log_views, notify_views, sign_in, views, webhook_views

app_name = "dashboard"

G = "g/<id:group_id>"
M = f"{G}/missions/<id:mission_id>"
W = f"{G}/work-items/<id:item_id>"

urlpatterns = [
    path("", views.groups, name="groups"),
    path("login/", sign_in.SignInView.as_view(), name="login"),
    path("login/refused/", sign_in.refused, name="sign_in_refused"),  # OIDC's, sign_in.py
    path("logout/", views.logout, name="logout"),
    path("notifications/", notify_views.notifications, name="notifications"),
    path("mail/", notify_views.mail, name="mail"),  # operators' (staff) caught mail
    path(f"{G}/", views.group, name="group"),
    path(f"{G}/log/", log_views.group_log, name="group_log"),
    path(f"{G}/missions/new", views.new_mission, name="new_mission"),
    path(f"{M}/", views.mission, name="mission"),
    path(f"{M}/approve", views.approve_mission, name="approve_mission"),
    path(f"{M}/refuse-approval", views.refuse_approval, name="refuse_approval"),
    path(f"{M}/end", views.end_mission, name="end_mission"),
    path(f"{M}/edges", views.change_edge, name="change_edge"),
    path(f"{M}/work-items/new", views.new_item, name="new_item"),
    path(f"{M}/proposals/<id:proposal_id>/authorize", views.authorize_proposal,
         name="authorize_proposal"),
    path(f"{W}/", views.work_item, name="work_item"),
    path(f"{W}/revise", views.revise, name="revise"),
    path(f"{W}/offer", views.offer, name="offer"),
    path(f"{W}/preempt", views.preempt, name="preempt"),
    path(f"{W}/unblock", views.unblock, name="unblock"),
    path(f"{W}/cancel", views.cancel, name="cancel"),
    path(f"{W}/child", views.create_child, name="create_child"),
    path(f"{W}/messages", views.post_message, name="post_message"),
    path(f"{W}/accept", views.accept_result, name="accept_result"),
    path(f"{W}/fail", views.fail, name="fail"),
    path(f"{W}/grant-execution", views.grant_execution, name="grant_execution"),
    path(f"{W}/refuse-execution", views.refuse_execution, name="refuse_execution"),
    path(f"{W}/submissions", views.submissions, name="submissions"),
    path(f"{G}/artifacts/<id:name>/", views.artifact, name="artifact"),
    path(f"{G}/artifacts/<id:name>/content", views.artifact_content, name="artifact_content"),
    path(f"{G}/webhooks/", webhook_views.webhooks, name="webhooks"),
    path(f"{G}/webhooks/<id:webhook_id>/", webhook_views.webhook, name="webhook"),
    path(f"{G}/webhooks/<id:webhook_id>/remove", webhook_views.remove_webhook,
         name="remove_webhook"),
    path(f"{G}/webhooks/<id:webhook_id>/rotate", webhook_views.rotate_webhook,
         name="rotate_webhook"),
    path(f"{G}/webhooks/<id:webhook_id>/send-again", webhook_views.send_again,
         name="send_again"),
]
