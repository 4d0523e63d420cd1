import json
import os

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from apps.bench import lifecycle


class Command(BaseCommand):
    help = ("Benchmarks, each beside the raw PostgreSQL operation measured in the same run. "
            "Default: full WorkItem lifecycles through daphne, for 100 Groups and for one "
            "hot Group.")

    def add_arguments(self, parser):
        parser.add_argument("--lifecycles", type=int, default=1000)
        parser.add_argument("--groups", type=int, default=100)
        parser.add_argument("--clients", type=int, default=8)
        parser.add_argument("--web-workers", type=int, default=os.cpu_count() or 2)
        parser.add_argument("--only", choices=["spread", "hot"])
        parser.add_argument("--json", action="store_true", help="print only the JSON result")

    def handle(self, *args, **options):
        if connection.vendor != "postgresql":
            raise CommandError("mw_bench measures PostgreSQL: set DATABASE_URL")
        report = (lambda text: None) if options["json"] else self.stderr.write
        results = []
        for name, groups in (("spread", options["groups"]), ("hot", 1)):
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
                 f"  lifecycle commands/s {api['commandsPerSecond']:>9}   "
                 f"(failures: {api['failures']})",
                 f"  raw SQL tx/s         {raw['transactionsPerSecond']:>9}",
                 f"  ratio                {r['ratio']:>9}",
                 "  command                 p50 ms    p99 ms"]
        for name, stat in api["latency"].items():
            lines.append(f"  {name:<22} {stat['p50Ms']:>7} {stat['p99Ms']:>9}")
        return "\n".join(lines)
