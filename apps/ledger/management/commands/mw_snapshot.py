from apps.ledger import snapshots
from apps.ledger.archive import archive_through
from apps.ledger.operator import OperatorCommand


class Command(OperatorCommand):
    help = ("Snapshot the Group's projected state at its head, signed by the authority key. "
            "With --archive, also move the events up to it out of the online log into the "
            "archive (still retrievable, still hash-chained) and raise the online floor. "
            "Prints {snapshotId, sequence}.")

    def add_arguments(self, parser):
        parser.add_argument("group_id")
        parser.add_argument("--archive", action="store_true",
                            help="archive the events up to the snapshot")
        parser.add_argument("--sequence", type=int, default=None,
                            help="snapshot at this sequence instead of the head")

    def run(self, group_id, archive=False, sequence=None, **options):
        snapshot = snapshots.take(group_id, sequence)
        result = {"snapshotId": snapshot.id, "sequence": snapshot.sequence,
                  "hash": snapshot.hash, "url": snapshots.url(snapshot)}
        if archive:
            result["onlineFloor"] = archive_through(snapshot)
        return result
