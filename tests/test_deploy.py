import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_production_settings_pass_the_deploy_checks():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mission_weave.settings_production",
           "SECRET_KEY": "x7Gq-" * 12, "MW_AUTHORITY_KEY": "A" * 43}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_settings_refuse_to_start_without_a_secret_key():
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    env.update(DJANGO_SETTINGS_MODULE="mission_weave.settings_production",
               MW_AUTHORITY_KEY="A" * 43)
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_kubernetes_probes_the_web_pods_liveness_and_readiness_over_http():
    import yaml

    documents = list(yaml.safe_load_all((ROOT / "deploy/k8s/web.yaml").read_text()))
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    (web,) = deployment["spec"]["template"]["spec"]["containers"]
    assert web["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert web["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert web["readinessProbe"]["timeoutSeconds"] >= 1


def test_compose_checks_that_the_web_service_is_ready():
    import yaml

    compose = yaml.safe_load((ROOT / "deploy/compose.yaml").read_text())
    check = compose["services"]["web"]["healthcheck"]["test"]
    assert check[:3] == ["CMD", "python", "-c"]
    assert "http://127.0.0.1:8000/readyz" in check[3]
    compile(check[3], "healthcheck", "exec")  # the one-liner is valid Python


def test_production_logs_json_lines_with_one_per_request_and_development_plain_text():
    script = ("import django, json; django.setup(); from django.conf import settings; "
              "print(json.dumps([settings.LOGGING['handlers']['console']['formatter'], "
              "settings.MW_REQUEST_LOG]))")
    env = {k: v for k, v in os.environ.items() if k not in ("MW_LOG_FORMAT", "MW_REQUEST_LOG")}
    env.update(SECRET_KEY="x7Gq-" * 12, MW_AUTHORITY_KEY="A" * 43)
    answers = {}
    for module in ("mission_weave.settings_production", "mission_weave.settings"):
        result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                                env={**env, "DJANGO_SETTINGS_MODULE": module}, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        answers[module] = json.loads(result.stdout.splitlines()[-1])
    assert answers == {"mission_weave.settings_production": ["json", True],
                       "mission_weave.settings": ["plain", False]}
