import json
import os

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from apps.bench import lifecycle, renew


class Command(BaseCommand):
    help = ("Benchmarks, each beside the raw PostgreSQL operation measured in the same run. "
            "Default: full WorkItem lifecycles through daphne, for 100 Groups and for one "
            "hot Group.")

    def add_arguments(self, parser):
        parser.add_argument("--lifecycles", type=int, default=1000)
        parser.add_argument("--groups", type=int, default=100)
        parser.add_argument("--clients", type=int, default=8)
        parser.add_argument("--web-workers", type=int, default=os.cpu_count() or 2)
        parser.add_argument("--only", choices=["spread", "hot", "none"])
        parser.add_argument("--json", action="store_true", help="print only the JSON result")
        parser.add_argument("--sweep", action="store_true",
                            help="instead: expired leases over --groups Groups swept to "
                                 "completion, beside raw set-based SQL (apps/bench/sweep.py)")
        parser.add_argument("--sweep-leases", type=int, default=100_000)
        parser.add_argument("--sweepers", type=int, default=os.cpu_count() or 2,
                            help="sweeper processes at once, like Celery workers")
        parser.add_argument("--sweep-batch", type=int, default=None,
                            help="WorkItems per sweep round (default MW_SWEEP_BATCH)")
        parser.add_argument("--renew", action="store_true",
                            help="instead: lease renewals per second through daphne, beside "
                                 "raw SQL (apps/bench/renew.py)")
        parser.add_argument("--renew-leases", type=int, default=400)
        parser.add_argument("--renewals", type=int, default=10, help="per lease")

    def handle(self, *args, **options):
        if connection.vendor != "postgresql":
            raise CommandError("mw_bench measures PostgreSQL: set DATABASE_URL")
        report = (lambda text: None) if options["json"] else self.stderr.write
        if options["sweep"]:
            return self._sweep(options, report)
        results = []
        if options["renew"]:
            results.append(renew.scenario(options["groups"], options["renew_leases"],
                                          options["renewals"], options["clients"],
                                          options["web_workers"], report))
            options["only"] = "none"
        for name, groups in (("spread", options["groups"]), ("hot", 1)):  # the lifecycles
            if options["only"] in (None, name):
                results.append(lifecycle.scenario(name, groups, options["lifecycles"],
                                                  options["clients"], options["web_workers"],
                                                  report))
        for result in results:
            report(self._table(result))
        self.stdout.write(json.dumps(results, indent=None if options["json"] else 2))

    def _table(self, r) -> str:
        api, raw = r["api"], r["raw"]
        lines = [f"\n{r['scenario']}: {r['groups']} Group(s), {r['clients']} clients, "
                 f"daphne × {r['webWorkers']}",
                 f"  commands/s           {api['commandsPerSecond']:>9}   "
                 f"(failures: {api['failures']})",
                 f"  raw SQL tx/s         {raw['transactionsPerSecond']:>9}",
                 f"  ratio                {r['ratio']:>9}",
                 "  command                 p50 ms    p99 ms"]
        for name, stat in api["latency"].items():
            lines.append(f"  {name:<22} {stat['p50Ms']:>7} {stat['p99Ms']:>9}")
        return "\n".join(lines)

    def _sweep(self, options, report) -> None:
        from django.conf import settings

        from apps.bench import sweep

        r = sweep.scenario(options["sweep_leases"], options["groups"],
                           options["sweep_batch"] or settings.MW_SWEEP_BATCH,
                           options["sweepers"], report)
        c, swept, raw = r["commands"], r["sweep"], r["raw"]
        report(f"\nsweep: {r['leases']} expired leases over {r['groups']} Groups "
               f"(batch {r['batch']}, {r['sweepers']} sweepers, {swept['rounds']} rounds)\n"
               f"  sweeper        {swept['seconds']:>8} s {swept['leasesPerSecond']:>10} leases/s\n"
               f"  raw SQL        {raw['seconds']:>8} s {raw['leasesPerSecond']:>10} leases/s\n"
               f"  raw / sweeper  {r['rawOverSweep']:>8}x\n"
               f"  command p99    idle {c['idle']['p99Ms']} ms, during the sweep "
               f"{c['duringSweep']['p99Ms']} ms ({c['p99Ratio']}x; {c['path']})\n"
               f"  verify {r['verify']['groupId']}: {r['verify']['problems'] or 'ok'}")
        self.stdout.write(json.dumps(r, indent=None if options["json"] else 2))
