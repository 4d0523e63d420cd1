import json
import time

from django.conf import settings
from django.core.management.base import CommandError

from apps.ledger.operator import OperatorCommand
from apps.work import sweeper


class Command(OperatorCommand):
    help = ("Expire leases, start-by deadlines and blocked leases, and dispatch the next "
            "sequential offers: the same sweep Celery beat runs. Prints its counts as JSON; "
            "with --loop, one line per round every MW_SWEEP_INTERVAL_SECONDS until interrupted.")

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=None,
                            help="most WorkItems per round (default MW_SWEEP_BATCH)")
        parser.add_argument("--loop", action="store_true")

    def run(self, limit=None, loop=False, **options):
        if limit is not None and limit < 1:
            raise CommandError("--limit must be at least 1")
        if not loop:
            return sweeper.sweep(limit=limit)
        try:
            while True:
                self.stdout.write(json.dumps(sweeper.sweep(limit=limit)))
                self.stdout.flush()
                time.sleep(settings.MW_SWEEP_INTERVAL_SECONDS)
        except KeyboardInterrupt:
            return {"stopped": True}
