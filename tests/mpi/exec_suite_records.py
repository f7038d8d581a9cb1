"""Report collectives back into records (shared by the MPI scripts)."""

from tensoropt_py.exec.backend import CollectiveRecord


def last_records(rep):
    """The :class:`CollectiveRecord` list of a report's last iteration."""
    return [CollectiveRecord(c["kind"], tuple(c["group"]), c["nbytes"], c["phase"], c["seconds"], c["tag"])
            for c in rep.collectives]
