"""Set up, and check, a database the test process is not connected to (a private
PostgreSQL of a fault test), in a Django process of its own on DATABASE_URL:

    python -m tests.faults.seed cast RUN GROUPS WORKERS  # migrate; Groups, agents, sessions
    python -m tests.faults.seed verify GROUP...          # mw_verify and tests/faults/checks

Each prints one JSON document on stdout. `cast` gives the Groups (each with Mission `m`,
as apps/bench/http_lifecycles.cast makes them) and the agents' keys and open sessions:
{"groups": [...], "coordinator": AGENT, "workers": [AGENT]}, an AGENT being {agentId,
keyId, privateKey, token, sessionEpoch}. `verify` gives {"problems": [...]}."""

import json
import os
import sys


def main(argv: list) -> dict:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mission_weave.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from mission_weave.protocol import canonical

    if argv[0] == "cast":
        from apps.bench import http_lifecycles

        call_command("migrate", verbosity=0, interactive=False)
        run, groups, workers = argv[1], int(argv[2]), int(argv[3])
        cast, coordinator, hands = http_lifecycles.cast(run, groups, workers)

        def agent(a):
            return {"agentId": a.name, "keyId": a.key_id, "token": a.token,
                    "sessionEpoch": a.session_epoch,
                    "privateKey": canonical.private_key_b64url(a.key)}
        return {"groups": [g.id for g in cast], "coordinator": agent(coordinator),
                "workers": [agent(w) for w in hands]}
    if argv[0] == "verify":
        from apps.ledger.verify import verify_group
        from tests.faults import checks

        problems = checks.gapless(argv[1:])
        for group_id in argv[1:]:
            problems += verify_group(group_id) + checks.partial_states(group_id)
        return {"problems": problems}
    raise SystemExit(f"unknown verb {argv[0]!r}: cast or verify")


def run(database_url: str, *argv: str) -> dict:
    """`python -m tests.faults.seed ARGV...` on `database_url`; its JSON answer."""
    import subprocess

    from apps.bench.harness import ROOT

    env = {**os.environ, "DATABASE_URL": database_url}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    done = subprocess.run([sys.executable, "-m", "tests.faults.seed", *argv], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
