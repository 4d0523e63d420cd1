"""The dashboard's small forms (Django forms: labels, typed values, errors beside their
field). Each turns what a person typed into a command body; the pipeline decides.
The Work Contract has a form of its own (contract_form.py)."""

from datetime import timedelta

from django import forms
from django.utils import timezone
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

from mission_weave.protocol.timefmt import format_time

COUNTS = (("tokens", "Tokens"), ("toolCalls", "Tool calls"),
          ("computeSeconds", "Compute seconds"), ("wallClockSeconds", "Wall-clock seconds"),
          ("sideEffects", "Side effects"))


class MissionForm(forms.Form):
    title = forms.CharField(max_length=10000)
    mission_id = forms.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$", required=False, label="Mission id (optional)",
        help_text="Letters, digits and _.:- ; left blank, the server chooses one.")
    owner = forms.ChoiceField(label="MissionOwner (gives the final Approval)")
    coordinator = forms.ChoiceField(label="Coordinator")
    delegates = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple,
        label="Delegates (may act as the Coordinator)")
    auto_dispatch = forms.BooleanField(
        required=False, label="Automatic dispatch: a declined or expired offer moves to "
                              "the next ranked candidate")
    financial_amount = forms.DecimalField(required=False, min_value=0, max_digits=21,
                                          decimal_places=6, label="Financial budget")
    financial_currency = forms.RegexField(r"^[A-Z]{3}$", required=False, initial="EUR",
                                          label="Currency (ISO 4217)")

    def __init__(self, *args, owners=(), coordinators=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["owner"].choices = [(p, p) for p in owners]
        self.fields["coordinator"].choices = [(p, p) for p in coordinators]
        self.fields["delegates"].choices = [(p, p) for p in coordinators]
        for name, label in COUNTS:
            self.fields[f"budget_{name}"] = forms.IntegerField(
                required=False, min_value=0, label=f"{label} budget")

    def budgets(self) -> dict:
        data = self.cleaned_data
        budgets = {name: data[f"budget_{name}"] for name, _ in COUNTS
                   if data.get(f"budget_{name}") is not None}
        if data.get("financial_amount") is not None:
            budgets["financial"] = {"amount": format(data["financial_amount"], "f"),
                                    "currency": data["financial_currency"] or "EUR"}
        return budgets

    def body(self) -> dict:
        data = self.cleaned_data
        body = {"title": data["title"], "ownerId": data["owner"],
                "coordinatorId": data["coordinator"], "delegates": data["delegates"],
                "autoDispatch": data["auto_dispatch"], "budgets": self.budgets()}
        if data["mission_id"]:
            body["missionId"] = data["mission_id"]
        return body


class ChildMissionForm(forms.Form):
    title = forms.CharField(max_length=10000, label="Child Mission title")
    child_mission_id = forms.RegexField(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$", required=False,
                                        label="Child Mission id (optional)")
    child_failure_policy = forms.ChoiceField(
        label="If the child Mission fails", initial="block",
        choices=[("block", "block this WorkItem (the Coordinator decides)"),
                 ("fail", "fail this WorkItem")])

    def body(self) -> dict:
        data = self.cleaned_data
        body = {"title": data["title"], "childFailurePolicy": data["child_failure_policy"]}
        if data["child_mission_id"]:
            body["childMissionId"] = data["child_mission_id"]
        return body


class OfferForm(forms.Form):
    candidates = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple,
        label="Named workers (in this order; leave empty to choose automatically)")
    auto = forms.BooleanField(required=False, initial=True,
                              label="auto: the server ranks the Group's workers")
    mode = forms.ChoiceField(choices=[("sequential", "sequential: one at a time, best first"),
                                      ("urgent", "urgent: several at once, first to accept")],
                             initial="sequential")
    candidate_count = forms.IntegerField(required=False, min_value=1,
                                         label="Candidates at once (urgent)")
    expires_in_minutes = forms.IntegerField(min_value=1, max_value=7 * 24 * 60, initial=10,
                                            label="Offer expires after (minutes)")

    def __init__(self, *args, workers=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["candidates"].choices = [(w, w) for w in workers]

    def clean(self):
        data = super().clean()
        if not data.get("auto") and not data.get("candidates"):
            raise forms.ValidationError("Choose workers by name, or tick auto.")
        if data.get("expires_in_minutes"):  # the expiry is dated when the form is sent
            data["expires_at"] = timezone.now() + timedelta(minutes=data["expires_in_minutes"])
        return data

    def body(self) -> dict:
        data = self.cleaned_data
        body = {"candidates": "auto" if data["auto"] else data["candidates"],
                "mode": data["mode"], "expiresAt": format_time(data["expires_at"])}
        if data["mode"] == "urgent" and data.get("candidate_count"):
            body["candidateCount"] = data["candidate_count"]
        return body


class ReasonForm(forms.Form):
    """A reason, sent as `body[member]` (work.cancel, work.request_preemption)."""
    member = "reason"
    reason = forms.CharField(max_length=10000, label="Reason")

    def body(self) -> dict:
        return {self.member: self.cleaned_data["reason"]}


class PreemptForm(ReasonForm):
    reason = forms.CharField(max_length=10000, label="Why preempt it (the worker sees this)")


class CancelForm(ReasonForm):
    reason = forms.CharField(max_length=10000, label="Why cancel it (recorded; this is final)")


class GrantForm(forms.Form):
    comment = forms.CharField(max_length=10000, required=False, label="Comment (optional)")

    def body(self) -> dict:
        comment = self.cleaned_data["comment"]
        return {"comment": comment} if comment else {}


class RefuseExecutionForm(ReasonForm):
    reason = forms.CharField(max_length=10000, label="Why it may not run",
                             widget=forms.Textarea(attrs={"rows": 2}))


class AcceptForm(forms.Form):
    """Accepting a result: a decision, with a note, and while the review has not passed
    a reason for each criterion it overrides (one field each, named after the criterion:
    `override-<id>`). No prefix: `note` is what the page has always posted."""
    note = forms.CharField(max_length=9000, label="Why you accept the result (recorded as "
                           "your Evidence)", widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args, item=None, overridden=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.overridden = list(overridden)
        described = {c["id"]: c for c in item.contract["acceptanceCriteria"]} if item else {}
        for criterion in self.overridden:
            what = described.get(criterion, {}).get("description", "")
            self.fields[f"override-{criterion}"] = forms.CharField(
                max_length=9000, widget=forms.Textarea(attrs={"rows": 2}),
                label=f"Why accept it although {criterion} has not passed"
                      f"{f' ({what[:120]})' if what else ''}",
                help_text="Your Evidence for this criterion: the MissionOwner reads it as "
                          "the reason it was overridden.")

    def reasons(self) -> dict:
        """criterion id -> the reason for overriding it."""
        return {c: self.cleaned_data[f"override-{c}"] for c in self.overridden}


class AcceptNoteForm(forms.Form):
    """Accepting a result with nothing to override (the review passed), or by someone the
    pipeline will answer: a note, optional (as AcceptForm without overridden criteria)."""
    note = forms.CharField(required=False)

    def reasons(self) -> dict:
        return {}


class KnownChoicesField(forms.MultipleChoiceField):
    """The values sent that are among its choices, in the order sent; any other is left
    out, not refused."""

    def clean(self, value):
        return [choice for choice in self.to_python(value) if self.valid_value(choice)]


class FailForm(forms.Form):
    """Failing a result: the criteria it fails (those of the item's contract; a box for one
    it no longer has is left out), a reason and whether it is final."""
    criteria = KnownChoicesField(required=False)
    reason = forms.CharField(required=False)
    permanent = forms.BooleanField(required=False)

    def __init__(self, *args, criteria=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["criteria"].choices = [(c, c) for c in criteria]

    def reason_given(self) -> str:
        return self.cleaned_data["reason"] or "failed review"


class ApproveMissionForm(forms.Form):
    """The final Approval of a Mission, with an optional comment."""
    comment = forms.CharField(required=False)

    def command(self) -> str:
        return "mission.approve"

    def body(self, mission_id: str) -> dict:
        comment = self.cleaned_data["comment"]
        return {"missionId": mission_id, **({"comment": comment} if comment else {})}


class EdgeForm(forms.Form):
    """An edge of the Mission's graph: `dependant` depends on `dependency`, added or
    removed (`op`)."""
    dependant = forms.CharField()
    dependency = forms.CharField()
    op = forms.CharField(required=False)

    def adds(self) -> bool:
        return self.cleaned_data["op"] != "remove"


class PlainTextInput(forms.TextInput):
    """A TextInput printed without a template: the markup of Django's input.html and
    attrs.html, every value escaped as they escape it. The Approval refusal has one per
    WorkItem, and each template render cost 2 ms of a 2,000-WorkItem page (issue 27)."""

    def render(self, name, value, attrs=None, renderer=None):
        widget = self.get_context(name, value, attrs)["widget"]
        html = (f'<input type="{conditional_escape(widget["type"])}" '
                f'name="{conditional_escape(widget["name"])}"')
        if widget["value"] is not None:
            html += f' value="{conditional_escape(str(widget["value"]))}"'
        for key, held in widget["attrs"].items():
            if held is True:
                html += f" {conditional_escape(key)}"
            elif held is not False:
                html += f' {conditional_escape(key)}="{conditional_escape(str(held))}"'
        return mark_safe(html + ">")  # each part escaped above


class RefuseApprovalForm(forms.Form):
    """Why the final Approval is not given yet: for the Mission, and optionally per
    WorkItem (one field each, in the Mission's order)."""
    reason = forms.CharField(max_length=10000, label="Why not yet (for the Coordinator)",
                             widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args, items=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.item_ids = [item.id for item in items]
        for index, item in enumerate(items):
            self.fields[f"item_{index}"] = forms.CharField(
                max_length=10000, required=False, widget=PlainTextInput,
                label=f"{item.id}: {item.contract['goal'][:80]} (optional)")

    def command(self) -> str:
        return "mission.refuse_approval"

    def body(self, mission_id: str) -> dict:
        data = self.cleaned_data
        per_item = [{"workItemId": item_id, "reason": data[f"item_{index}"]}
                    for index, item_id in enumerate(self.item_ids) if data[f"item_{index}"]]
        return {"missionId": mission_id, "reason": data["reason"], "workItems": per_item}


class UnblockForm(ReasonForm):
    member = "resolution"
    reason = forms.CharField(max_length=10000, label="Resolution (what the worker needed)")


class EndMissionForm(forms.Form):
    reason = forms.CharField(max_length=10000, label="Why end it (recorded)")
    how = forms.ChoiceField(choices=[("cancel", "Cancel it (no longer wanted)"),
                                     ("fail", "Fail it (it cannot succeed)")], initial="cancel",
                            widget=forms.RadioSelect, label="End the Mission")

    def command(self) -> str:
        return f"mission.{self.cleaned_data['how']}"  # ends every unfinished WorkItem too

    def body(self, mission_id: str) -> dict:
        return {"missionId": mission_id, "reason": self.cleaned_data["reason"]}


class MessageForm(forms.Form):
    kind = forms.ChoiceField(choices=[("message", "a message"),
                                      ("ambiguity", "an ambiguity (blocks acceptance)"),
                                      ("resolution", "an answer to an ambiguity")],
                             initial="message")
    text = forms.CharField(max_length=10000, widget=forms.Textarea(attrs={"rows": 3}))
    resolves = forms.CharField(required=False, max_length=100,
                               label="Answers the ambiguity (for an answer)")

    def body(self) -> dict:
        data = self.cleaned_data
        body = {"kind": data["kind"], "text": data["text"]}
        if data["kind"] == "resolution":
            body["resolves"] = data["resolves"]
        return body
