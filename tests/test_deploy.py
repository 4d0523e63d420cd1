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


# --- the variant past one database: Citus and Redis Sentinel (docs/operations.md) -------

def _compose_citus() -> dict:
    import yaml
    return yaml.safe_load((ROOT / "deploy/compose.citus.yaml").read_text())


def _k8s_citus(name: str) -> list:
    import yaml
    return list(yaml.safe_load_all((ROOT / "deploy/k8s/citus" / name).read_text()))


def _settings_of(env: dict) -> dict:
    """What the production settings make of a deploy file's database and Redis settings."""
    script = ("import django, json; django.setup(); from django.conf import settings; "
              "db = settings.DATABASES['default']; print(json.dumps([db['HOST'], db['NAME'], "
              "settings.REDIS_SENTINELS, settings.REDIS_SENTINEL_MASTER, settings.REDIS_URL]))")
    ours = ("REDIS_", "DATABASE_")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**clean, **{k: str(v) for k, v in env.items() if k.startswith(ours)},
             "DJANGO_SETTINGS_MODULE": "mission_weave.settings_production",
             "SECRET_KEY": "x7Gq-" * 12, "MW_AUTHORITY_KEY": "A" * 43})
    assert result.returncode == 0, result.stderr
    host, name, sentinels, master, url = json.loads(result.stdout.splitlines()[-1])
    return {"host": host, "name": name, "sentinels": [tuple(s) for s in sentinels],
            "master": master, "url": url}


def test_compose_citus_runs_every_process_on_the_coordinator_and_redis_through_sentinels():
    compose = _compose_citus()
    services = compose["services"]
    env = compose["x-app-env"]
    nodes = {name: service for name, service in services.items() if name.startswith("citus-")}
    workers = sorted(name for name in nodes if name.startswith("citus-worker"))

    assert {service["image"].split(":")[0] for service in nodes.values()} == {"citusdata/citus"}
    assert len(workers) >= 2
    registered = " ".join(services["cluster"]["command"])
    assert "citus_set_coordinator_host('citus-coordinator', 5432)" in registered
    assert all(f"citus_add_node('{worker}', 5432)" in registered for worker in workers)
    assert "mw_distribute" in services["migrate"]["command"][-1]
    assert services["migrate"]["command"][-1].index("migrate --noinput") < \
        services["migrate"]["command"][-1].index("mw_distribute")

    seen = _settings_of(env)
    assert (seen["host"], seen["url"]) == ("citus-coordinator", "")
    assert {host for host, _ in seen["sentinels"]} == {
        name for name in services if name.startswith("redis-sentinel")}
    sentinel = " ".join(services["redis-sentinel-1"]["command"])
    assert f"sentinel monitor {seen['master']} redis-primary 6379 2" in sentinel
    for process in ("web", "worker", "beat", "migrate"):
        assert services[process]["environment"] is env  # one environment, the coordinator's


def test_kubernetes_citus_registers_every_worker_and_the_app_finds_coordinator_and_sentinels():
    objects = {(o["kind"], o["metadata"]["name"]): o for name in
               ("citus.yaml", "redis-sentinel.yaml", "secret.yaml", "migrate-job.yaml")
               for o in _k8s_citus(name)}
    workers = objects[("StatefulSet", "citus-worker")]
    sentinels = objects[("StatefulSet", "redis-sentinel")]
    for node in ("citus-coordinator", "citus-worker"):
        (container,) = objects[("StatefulSet", node)]["spec"]["template"]["spec"]["containers"]
        assert container["image"].startswith("citusdata/citus:")
    (register,) = objects[("Job", "citus-cluster")]["spec"]["template"]["spec"]["containers"]
    registered = " ".join(register["command"])
    assert all(f"citus_add_node('citus-worker-{n}.citus-worker', 5432)" in registered
               for n in range(workers["spec"]["replicas"]))
    (migrate,) = objects[("Job", "missionweave-migrate")]["spec"]["template"]["spec"][
        "containers"]
    assert migrate["command"][-1].endswith("migrate --noinput && python manage.py mw_distribute")

    secret = objects[("Secret", "missionweave-secrets")]["stringData"]
    seen = _settings_of(secret)
    assert ("Service", seen["host"]) in objects and seen["url"] == ""
    assert seen["sentinels"] == [(f"redis-sentinel-{n}.redis-sentinel", 26379)
                                 for n in range(sentinels["spec"]["replicas"])]
    (sentinel,) = sentinels["spec"]["template"]["spec"]["containers"]
    assert f"sentinel monitor {seen['master']} redis-0.redis 6379 2" in sentinel["command"][-1]
