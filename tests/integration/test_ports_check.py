"""The ledger's ports (apps/ledger/ports.py) are checked by `manage.py check`
(apps/ledger/checks.py): a port left unplugged, or holding something its Protocol does
not describe, is an Error that names the port and what is wrong; with every port plugged
in as the apps plug them, there is none."""

import dataclasses
import types

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from apps.ledger import ports
from apps.ledger.checks import UNPLUGGED, UNSATISFIED, ports_plugged


def errors_of(**parts) -> list:
    return ports_plugged(parts=dataclasses.replace(ports.plugged, **parts))


def test_every_port_is_plugged_in_as_its_protocol_describes():
    assert ports_plugged() == []
    call_command("check")  # raises on an Error


@pytest.mark.parametrize("port", sorted(set(ports.PORTS) - {"observer"}))
def test_an_unplugged_port_is_an_error_that_says_how_to_plug_it(port):
    [error] = errors_of(**{port: ports.Unplugged(port)})

    assert error.id == UNPLUGGED and error.obj == f"apps.ledger.ports.{port}"
    assert error.msg == (f"the port {port!r} is not plugged in: the app that implements "
                         f"{ports.PORTS[port].__name__} must call ports.plug({port}=...) "
                         f"from its AppConfig.ready()")


def test_manage_py_check_fails_while_a_port_is_unplugged(monkeypatch):
    monkeypatch.setattr(ports.plugged, "facts", ports.Unplugged("facts"))

    with pytest.raises(SystemCheckError, match="the port 'facts' is not plugged in"):
        call_command("check")


def test_a_part_missing_a_method_is_an_error_naming_it():
    members = types.SimpleNamespace(membership=lambda group_id, principal, key_id=None: None,
                                    check_envelope_identity=lambda *args: None,
                                    cached=lambda *args: None, afresh=lambda *args: None,
                                    recheck=lambda *args: None, confirm=lambda *args: None)

    [error] = errors_of(members=members)

    assert error.id == UNSATISFIED
    assert "has no check_membership_epoch() (Members asks for one)" in error.msg
    assert error.hint == "apps.ledger.ports.Members says what the ledger calls"


def test_a_method_that_cannot_take_the_ledgers_arguments_is_an_error():
    hub = types.SimpleNamespace(events=lambda group_id: None,
                                membership_changed=lambda group_id, principal: None)

    [error] = errors_of(local_hub=hub)

    assert error.id == UNSATISFIED
    assert "cannot take events(group_id, documents) as LocalHub calls it" in error.msg


def test_a_subscriber_that_cannot_take_a_commit_is_an_error():
    def late(group_id):
        pass

    [error] = errors_of(committed=[*ports.plugged.committed, late])

    assert error.id == UNSATISFIED and error.obj == "apps.ledger.ports.committed"
    assert "late cannot take __call__(group_id, documents)" in error.msg


def test_an_unplugged_port_says_which_when_it_is_used():
    with pytest.raises(RuntimeError, match="the ledger's port 'answers' is not plugged in"):
        ports.Unplugged("answers").with_bearer("g", {}, None)
