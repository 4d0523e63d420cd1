import json
import os

from django.core.management.base import BaseCommand, CommandError

from apps.bench import http_lifecycles, renew


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
        parser.add_argument("--http-servers", default="daphne", metavar="A,B,...",
                            help="the lifecycles through each of these ASGI servers in turn: "
                                 "daphne, uvicorn, granian (the last two from the `bench` "
                                 "extra); the first is the one the ratio is of")
        parser.add_argument("--json", action="store_true", help="print only the JSON result")
        parser.add_argument("--sweep", action="store_true",
                            help="instead: expired leases over --groups Groups swept to "
                                 "completion, beside raw set-based SQL (apps/bench/sweep_load.py)")
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
        parser.add_argument("--replay", action="store_true",
                            help="instead: a Group's log replayed over HTTP paging and over "
                                 "the WebSocket, beside a raw COPY (apps/bench/replay.py)")
        parser.add_argument("--replay-events", type=int, default=20_000)
        parser.add_argument("--port", type=int, default=None,
                            help="the port of the server --replay starts (default: a free one)")
        parser.add_argument("--blobs", action="store_true",
                            help="instead: blob PUT/GET MB/s through daphne beside sha256sum "
                                 "and cp of the same bytes, and server peak RSS growth "
                                 "(apps/bench/blob_throughput.py)")
        parser.add_argument("--blob-sizes", default="1,100", help="MiB, comma-separated")
        parser.add_argument("--fanout", action="store_true",
                            help="instead: event delivery latency from commit to WebSocket "
                                 "receipt, beside raw Redis pub/sub (apps/bench/fanout.py)")
        parser.add_argument("--fanout-subscribers", default="1,50,100",
                            help="subscriber counts, comma-separated")
        parser.add_argument("--fanout-rate", type=float, default=None, metavar="EVENTS_PER_S",
                            help="events committed per second in --fanout (deliveries/s = "
                                 "this x subscribers); default: 5,000 deliveries/s, at most "
                                 "100 events/s")
        parser.add_argument("--fanout-seconds", type=float, default=5.0,
                            help="seconds of paced commits per subscriber count")
        parser.add_argument("--load", action="store_true",
                            help="instead: a mixed agent workload for --seconds (lifecycles, "
                                 "renewals, progress, submissions, takeovers, WebSocket "
                                 "subscribers, dashboard reads), beside raw SQL over the same "
                                 "commands (apps/bench/load.py)")
        parser.add_argument("--seconds", type=float, default=30.0,
                            help="how long --load drives its workload")
        parser.add_argument("--load-subscribers", type=int, default=20,
                            help="WebSocket subscribers of --load, spread over the Groups")
        parser.add_argument("--celery-workers", type=int, default=1,
                            help="Celery workers --load starts (the first with beat): the "
                                 "review of each submission, the sweeper")
        parser.add_argument("--pages", action="store_true",
                            help="instead: the Mission page of a graph of --page-items "
                                 "WorkItems and a WorkItem page, rendered in-process, with "
                                 "their SQL queries, beside the raw SELECT of the WorkItems "
                                 "(apps/bench/page_renders.py)")
        parser.add_argument("--page-items", type=int, default=200)
        parser.add_argument("--page-renders", type=int, default=20, help="per page")
        parser.add_argument("--log-events", type=int, default=None, metavar="N",
                            help="with --pages: instead, the Group log page of a Group of N "
                                 "events (COPY, chained), warm and cold, p50/p95, with the "
                                 "plans of its reads (apps/bench/log_page_renders.py)")
        parser.add_argument("--scale", action="store_true",
                            help="instead: how cost grows: lifecycle commands/s against web "
                                 "processes and against Groups, command latency against log "
                                 "length, mw_verify and replay time against log length, each "
                                 "beside raw SQL (apps/bench/scale.py)")
        parser.add_argument("--scale-workers", default="1,2,4", metavar="N,N,...",
                            help="web processes, for --scale's first part ('' skips it)")
        parser.add_argument("--scale-groups", default="1,10,100,1000", metavar="N,N,...",
                            help="Group counts, for --scale's second part ('' skips it)")
        parser.add_argument("--scale-log", default="10000,100000,1000000", metavar="N,N,...",
                            help="log lengths in events, for --scale's third and fourth parts "
                                 "('' skips them)")
        parser.add_argument("--scale-commands", type=int, default=200,
                            help="commands timed at each log length")

    def handle(self, *args, **options):
        report = (lambda text: None) if options["json"] else self.stderr.write
        if options["sweep"]:
            return self._sweep(options, report)
        if options["replay"]:
            return self._replay(options, report)
        if options["blobs"]:
            return self._blobs(options, report)
        if options["fanout"]:
            return self._fanout(options, report)
        if options["load"]:
            return self._load(options, report)
        if options["scale"]:
            return self._scale(options, report)
        if options["pages"]:
            return self._pages(options, report)
        results = []
        if options["renew"]:
            results.append(renew.scenario(options["groups"], options["renew_leases"],
                                          options["renewals"], options["clients"],
                                          options["web_workers"], report))
            options["only"] = "none"
        http_servers = self._http_servers(options["http_servers"])
        for name, groups in (("spread", options["groups"]), ("hot", 1)):  # the lifecycles
            if options["only"] in (None, name):
                results.append(http_lifecycles.scenario(name, groups, options["lifecycles"],
                                                  options["clients"], options["web_workers"],
                                                  report, http_servers))
        for result in results:
            report(self._table(result))
        self.stdout.write(json.dumps(results, indent=None if options["json"] else 2))

    @staticmethod
    def _http_servers(text: str) -> tuple:
        import importlib.util

        from apps.bench.harness import HTTP_SERVERS

        names = tuple(n.strip() for n in text.split(",") if n.strip())
        unknown = [n for n in names if n not in HTTP_SERVERS]
        if not names or unknown:
            raise CommandError(f"--http-servers takes {', '.join(HTTP_SERVERS)}; not "
                               f"{', '.join(unknown) or 'nothing'}")
        missing = [n for n in names if n != "daphne" and importlib.util.find_spec(n) is None]
        if missing:
            raise CommandError(f"{', '.join(missing)} not installed: pip install -e "
                               f"'.[bench]'")
        return names

    def _table(self, r) -> str:
        api, raw = r["api"], r["raw"]
        lines = [f"\n{r['scenario']}: {r['groups']} Group(s), {r['clients']} clients, "
                 f"{r.get('httpServer', 'daphne')} × {r['webWorkers']}",
                 f"  commands/s           {api['commandsPerSecond']:>9}   "
                 f"(failures: {api['failures']})",
                 f"  raw SQL tx/s         {raw['transactionsPerSecond']:>9}",
                 f"  ratio                {r['ratio']:>9}"]
        if "cpuMsPerCommand" in api:
            cpu, raw_cpu = api["cpuMsPerCommand"], raw["cpuMsPerTransaction"]
            lines.append(f"  CPU ms per command   clients {cpu['client']} + server "
                         f"{cpu['server']} + PostgreSQL {cpu['postgres']}; raw: client "
                         f"{raw_cpu['client']} + PostgreSQL {raw_cpu['postgres']}")
        if "inProcess" in r:
            alone, ceiling = r["inProcess"]["cpuMsPerCommand"], r["ceiling"]
            lines += [f"  pipeline alone       {alone['pipeline']} + PostgreSQL "
                      f"{alone['postgres']} CPU ms per command (in-process, no HTTP; "
                      f"failures: {r['inProcess']['failures']})",
                      f"  ratio ceiling        {ceiling['http']} at this CPU per command, "
                      f"{ceiling['pipelineAlone']} for the pipeline alone "
                      f"(all {ceiling['cores']} cores busy)"]
        if "groupCommit" in api:
            batches = api["groupCommit"]
            lines.append("  group commit         " + (
                f"{batches['batches']} transactions, {batches['meanSize']} commands each on average"
                if batches else "no batches (MW_GROUP_COMMIT=0)"))
        lines.append("  command                 p50 ms    p99 ms")
        for name, stat in api["latency"].items():
            lines.append(f"  {name:<22} {stat['p50Ms']:>7} {stat['p99Ms']:>9}")
        if "cpuRatio" in r:
            latency = r["latencyRatio"]
            lines += [f"  cpuRatio             {r['cpuRatio']:>9}   (all CPU per command / "
                      f"the raw transaction's)",
                      f"  serverCpuRatio       {r['serverCpuRatio']:>9}   (server CPU per "
                      f"command / the raw transaction's)",
                      f"  latencyRatio         p50 {latency['p50']} / p99 {latency['p99']}   "
                      f"(one at a time: {latency['commandMs']['p50Ms']}/"
                      f"{latency['commandMs']['p99Ms']} ms, raw {latency['rawMs']['p50Ms']}/"
                      f"{latency['rawMs']['p99Ms']} ms)",
                      "  roundTrips           " + ", ".join(
                          f"{t} {n}" for t, n in r["roundTrips"].items())]
        if "httpServers" in r:
            lines.append("  server        commands/s   x first   max p99 ms   failures")
            for name, s in r["httpServers"].items():
                lines.append(f"  {name:<12} {s['commandsPerSecond']:>11} {s['overFirst']:>9} "
                             f"{s['p99Ms']:>12} {s['failures']:>10}")
        return "\n".join(lines)

    def _blobs(self, options, report) -> None:
        from apps.bench import blob_throughput

        r = blob_throughput.scenario(self._counts(options, "blob_sizes", "whole MiB"), report)
        report("\nblobs through daphne × 1 (MB/s = MiB/s; server and client both hash)\n"
               "  size MiB   PUT     GET     sha256sum  cp       PUT/sha  GET/sha  "
               "server peak RSS growth PUT/GET")
        for s in r["sizes"]:
            rate, growth = s["MBps"], s["serverPeakRssGrowthMiB"]
            report(f"  {s['sizeMiB']:>8g} {rate['upload']:>7} {rate['download']:>7} "
                   f"{rate['sha256sum']:>9} {rate['cp']:>8} {s['uploadOverSha256sum']:>8} "
                   f"{s['downloadOverSha256sum']:>8}  "
                   f"{growth['upload']} / {growth['download']} MiB")
        self.stdout.write(json.dumps(r, indent=None if options["json"] else 2))

    def _sweep(self, options, report) -> None:
        from django.conf import settings

        from apps.bench import sweep_load

        r = sweep_load.scenario(options["sweep_leases"], options["groups"],
                           options["sweep_batch"] or settings.MW_SWEEP_BATCH,
                           options["sweepers"], report)
        c, swept, raw = r["commands"], r["sweep"], r["raw"]
        report(f"\nsweep: {r['leases']} expired leases over {r['groups']} Groups "
               f"(batch {r['batch']}, {r['sweepers']} sweepers, {swept['rounds']} rounds)\n"
               f"  sweeper        {swept['seconds']:>8} s {swept['leasesPerSecond']:>10} leases/s\n"
               f"  raw SQL        {raw['seconds']:>8} s {raw['leasesPerSecond']:>10} leases/s\n"
               f"  raw / sweeper  {r['rawOverSweep']:>8}x\n"
               f"  command p99    idle {c['idle']['p99Ms']} ms (before "
               f"{c['idleBeforeP99Ms']}, after {c['idleAfterP99Ms']}), during the sweep "
               f"{c['duringSweep']['p99Ms']} ms ({c['p99Ratio']}x; {c['path']})\n"
               f"  verify {r['verify']['groupId']}: {r['verify']['problems'] or 'ok'}")
        self.stdout.write(json.dumps(r, indent=None if options["json"] else 2))

    def _replay(self, options, report) -> None:
        from apps.bench import replay

        r = replay.scenario(options["replay_events"], options["web_workers"], report,
                            options["port"])
        lines = [f"\nreplay: {r['events']} events of one Group, daphne × {r['webWorkers']}",
                 f"  raw COPY       {r['raw']['eventsPerSecond']:>10} events/s",
                 f"  HTTP paging    {r['http']['eventsPerSecond']:>10} events/s "
                 f"({r['httpOverRaw']} of raw)"]
        if "eventsPerSecond" in r.get("websocket", {}):
            lines.append(f"  WebSocket      {r['websocket']['eventsPerSecond']:>10} events/s "
                         f"({r['websocketOverRaw']} of raw)")
        elif "websocket" in r:
            lines.append(f"  WebSocket      failed: {r['websocket']['error']}")
        # Time per event replayed over the raw COPY's (replay.py's rates, inverted).
        r["verifyRatio"] = {
            path: round(r["raw"]["eventsPerSecond"] / r[path]["eventsPerSecond"], 2)
            for path in ("http", "websocket") if r.get(path, {}).get("eventsPerSecond")}
        lines.append(f"  verifyRatio    {r['verifyRatio']} (time per event over raw COPY's)")
        report("\n".join(lines))
        self.stdout.write(json.dumps(r, indent=None if options["json"] else 2))

    def _pages(self, options, report) -> None:
        from apps.bench import page_renders

        if options["log_events"] is not None:
            return self._log_page(options, report)

        if options["page_items"] < 2 * page_renders.ROW or options["page_renders"] < 1:
            raise CommandError(f"--page-items must be at least {2 * page_renders.ROW} (two rows), "
                               "--page-renders at least 1")
        r = page_renders.scenario(options["page_items"], options["page_renders"], report)
        lines = [f"\npages: {r['workItems']} WorkItems in one Mission, median of "
                 f"{r['renders']} renders in-process",
                 "  page           ms        x raw    KB      SQL queries (at "
                 f"{r['tenth']} WorkItems)"]
        for name, key in (("Mission", "missionPage"), ("WorkItem", "workItemPage")):
            page = r[key]
            lines.append(f"  {name:<12} {page['p50Ms']:>8} {r[key + 'OverRaw']:>9} "
                         f"{page['kilobytes']:>7}   {page['queries']} "
                         f"({page['queriesAtATenth']})")
        lines.append(f"  raw SELECT   {r['raw']['p50Ms']:>8}   of {r['raw']['rows']} rows")
        report("\n".join(lines))
        self.stdout.write(json.dumps(r, indent=None if options["json"] else 2))

    def _log_page(self, options, report) -> None:
        from apps.bench import log_page_renders

        if options["log_events"] < 1 or options["page_renders"] < 1:
            raise CommandError("--log-events and --page-renders must be at least 1")
        r = log_page_renders.scenario(options["log_events"], options["page_renders"], report)
        report(log_page_renders.table(r))
        self.stdout.write(json.dumps(r, indent=None if options["json"] else 2))

    def _fanout(self, options, report) -> None:
        from apps.bench import fanout

        counts = self._counts(options, "fanout_subscribers")
        if options["fanout_rate"] is not None and options["fanout_rate"] <= 0:
            raise CommandError("--fanout-rate must be positive")
        r = fanout.scenario(counts, options["fanout_seconds"], options["web_workers"], report,
                            options["fanout_rate"])
        lines = [f"\nfanout: commit -> receipt, daphne × {r['webWorkers']}",
                 "  subs  events/s  deliveries/s   WS p50/p99 ms     raw p50/p99 ms   p99 ratio"]
        for row in r["runs"]:
            ws, raw = row["websocket"], row["rawRedis"]
            lines.append(f"  {row['subscribers']:>4} {row['eventsPerSecond']:>9g} "
                         f"{ws['deliveriesPerSecond']:>13} {ws['p50Ms']:>8}/{ws['p99Ms']:<8} "
                         f"{raw['p50Ms']:>8}/{raw['p99Ms']:<8} {row['p99Ratio']:>7}")
        report("\n".join(lines))
        self.stdout.write(json.dumps(r, indent=None if options["json"] else 2))

    def _load(self, options, report) -> None:
        from apps.bench import load

        if options["seconds"] <= 0 or options["clients"] < 1 or options["groups"] < 1:
            raise CommandError("--seconds, --clients and --groups must be positive")
        if options["load_subscribers"] < 0 or options["celery_workers"] < 0:
            raise CommandError("--load-subscribers and --celery-workers cannot be negative")
        r = load.scenario(options["seconds"], options["groups"], options["clients"],
                          options["web_workers"], options["load_subscribers"],
                          options["celery_workers"], report)
        api, raw, ws = r["api"], r["raw"], r["websocket"]
        lines = [f"\nload: {r['groups']} Groups, {r['clients']} lanes, daphne × "
                 f"{r['webWorkers']}, Celery × {r['celeryWorkers']}, {api['seconds']} s",
                 f"  operations/s         {api['operationsPerSecond']:>9}   "
                 f"({api['operations']} requests)",
                 f"  commands/s           {api['commandsPerSecond']:>9}   "
                 f"({api['lifecycles']} lifecycles, {api['rescues']} takeovers)",
                 f"  raw SQL tx/s         {raw['transactionsPerSecond']:>9}",
                 f"  ratio                {r['ratio']:>9}",
                 f"  errors               {api['errorCount']:>9}   {api['errors'] or ''}",
                 f"  late commands fenced {api['fenced']:>9}   "
                 f"(stale accepted: {api['staleAccepted']})"]
        if ws is not None:
            lines.append(f"  WebSocket            {ws['deliveriesPerSecond']:>9} deliveries/s "
                         f"to {ws['subscribers']}, p50 {ws['p50Ms']} / p99 {ws['p99Ms']} ms, "
                         f"missing {ws['missing']}, duplicates {ws['duplicates']}")
        lines.append("  operation               p50 ms    p99 ms        n")
        for name, stat in api["latency"].items():
            lines.append(f"  {name:<22} {stat['p50Ms']:>7} {stat['p99Ms']:>9} {stat['n']:>8}")
        report("\n".join(lines))
        if ws is not None:
            ws.pop("sockets")  # per socket, in the table's sums
        self.stdout.write(json.dumps(r, indent=None if options["json"] else 2))

    @staticmethod
    def _counts(options, name: str, unit: str = "whole numbers",
                skippable: bool = False) -> list:
        """A comma-separated option of positive whole numbers; '' (none) only where
        `skippable`."""
        flag = "--" + name.replace("_", "-")
        try:
            counts = [int(n) for n in options[name].split(",") if n.strip()]
        except ValueError:
            raise CommandError(f"{flag} takes {unit}, comma-separated") from None
        if (not counts and not skippable) or (counts and min(counts) < 1):
            raise CommandError(f"{flag} must be positive")
        return counts

    def _scale(self, options, report) -> None:
        from apps.bench import scale

        if options["scale_commands"] < 1 or options["lifecycles"] < 1:
            raise CommandError("--scale-commands and --lifecycles must be positive")
        r = scale.scenario(self._counts(options, "scale_workers", skippable=True),
                           self._counts(options, "scale_groups", skippable=True),
                           self._counts(options, "scale_log", skippable=True),
                           options["lifecycles"],
                           options["groups"], options["clients"], options["scale_commands"],
                           report, options["web_workers"])
        lines = [f"\nscale: {r['lifecycles']} lifecycles, {r['clients']} clients each; "
                 f"load average {' '.join(f'{n:.2f}' for n in r['loadAverage'])} before, "
                 f"{' '.join(f'{n:.2f}' for n in r['loadAverageAfter'])} after"]
        for part, key, label in (("workers", "webWorkers", "web processes"),
                                 ("groups", "groups", "Groups")):
            if part not in r:
                continue
            first = r[part][0]
            fixed = (f"{first['groups']} Groups" if part == "workers"
                     else f"daphne × {first['webWorkers']}")
            lines += [f"\n  commands/s against {label} ({fixed})",
                      f"  {label:>13}  commands/s  raw tx/s   ratio   max p99 ms   failures"]
            for s in r[part]:
                api = s["api"]
                lines.append(f"  {s[key]:>13} {api['commandsPerSecond']:>11} "
                             f"{s['raw']['transactionsPerSecond']:>9} {s['ratio']:>7} "
                             f"{max(v['p99Ms'] for v in api['latency'].values()):>12} "
                             f"{api['failures']:>10}")
        if "log" in r:
            log = r["log"]
            lines += [f"\n  command latency against log length (one Group, {log['commands']} "
                      f"commands one at a time, daphne × {log['webWorkers']})",
                      "         events   lease.renew p50/p99   work.progress p50/p99   "
                      "raw tx p50/p99   failures   fill s (events/s)"]
            for row in log["latency"]:
                api, raw = row["api"]["latency"], row["raw"]
                cells = [f"{api[t]['p50Ms']}/{api[t]['p99Ms']}" if t in api else "-"
                         for t in ("lease.renew", "work.progress")]
                lines.append(f"  {row['events']:>13} {cells[0]:>21} {cells[1]:>23} "
                             f"{raw['p50Ms']:>10}/{raw['p99Ms']:<6} {row['api']['failures']:>8}   "
                             f"{row['fillSeconds']} ({row['fillEventsPerSecond']})")
            lines += ["\n  mw_verify and replay against log length (µs per event)",
                      "         events   verify s (µs/ev)     replay s (µs/ev)     "
                      "raw COPY s (µs/ev)   problems"]
            for row in log["verify"]:
                lines.append(f"  {row['events']:>13}   {row['verifySeconds']:>8} "
                             f"({row['verifyUsPerEvent']:<7}) {row['replaySeconds']:>9} "
                             f"({row['replayUsPerEvent']:<7}) {row['raw']['seconds']:>9} "
                             f"({row['raw']['usPerEvent']:<6})   "
                             f"{len(row['problems']) or 'none'}")
            if log["verify"]:
                r["verifyRatio"] = log["verify"][-1]["verifyRatio"]  # the longest log
                lines.append(f"  verifyRatio at {r['verifyRatio']['events']} events: verify "
                             f"{r['verifyRatio']['verify']}x, replay "
                             f"{r['verifyRatio']['replay']}x the raw COPY per event")
            for what, g in log["linear"].items():
                lines.append(f"  {what:<7} µs/event, largest over smallest: "
                             f"{g['perEventGrowth']}x ({'linear' if g['linear'] else 'NOT linear'}"
                             f", within {scale.LINEAR}x)")
        report("\n".join(lines))
        self.stdout.write(json.dumps(r, indent=None if options["json"] else 2))
