"""GET /healthz, /readyz and /metrics (docs/operations.md). They are answered ahead of the
host check and the HTTPS redirect (middleware.OperationsEndpointsMiddleware): probes and
scrapers call the pod's address over plain HTTP."""

from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector

from . import metric_files, metrics, metrics_access, readiness
from .collectors import StateCollector


@require_safe
def healthz(request):
    """The process is up and serving: nothing else is asked."""
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request):
    checks = readiness.checks()
    ready = all(result == "ok" for result in checks.values())
    if not ready and not metrics_access.allowed(request):
        # Why a part failed names hosts, ports and users: only for whom /metrics serves.
        checks = {part: "ok" if result == "ok" else "failed" for part, result in checks.items()}
    return JsonResponse({"status": "ready" if ready else "unavailable", "checks": checks},
                        status=200 if ready else 503)


@require_safe
def metrics_view(request):
    if not metrics_access.allowed(request):
        return HttpResponse("Forbidden\n", status=403, content_type="text/plain")
    registry = CollectorRegistry()
    folder = metric_files.folder()
    if folder:
        metric_files.forget_dead(folder)
        MultiProcessCollector(registry, folder)
    else:
        registry.register(metrics.REGISTRY)
    registry.register(StateCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_PLAIN_0_0_4)
