"""The ``jobs`` commands of ``python -m shared.ops``.

    python -m shared.ops jobs reindex [--dry-run] [--json]

``reindex`` is an upgrade step: it writes the job index's tags on every job stored by a
version without them (``job_reindex``), so the watchdog and the usage report see those
jobs too. It reads every retained job name once; run it once after upgrading.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from shared.entrypoints.cli.ops_help import command_parser
from shared.job_reindex import JobReindexer


def reindex_command(args: argparse.Namespace, reindexer: JobReindexer) -> int:
    def progress(done: int, total: int) -> None:
        print(f"{done:,} of {total:,} untagged jobs", file=sys.stderr, flush=True)

    report = reindexer.reindex(dry_run=args.dry_run, progress=progress)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
        return 0
    verb = "would tag" if args.dry_run else "tagged"
    print(
        f"{report.listed:,} documents: {report.already_tagged:,} already tagged, {verb} "
        f"{report.tagged:,}, {report.changed_meanwhile:,} changed meanwhile (tagged by that "
        f"write), {report.vanished:,} vanished, {len(report.not_jobs):,} not jobs"
    )
    for name in report.not_jobs:
        print(f"not a job, left alone: {name}", file=sys.stderr)
    return 0


def add_jobs_commands(commands: Any) -> None:
    """Add the ``jobs`` area to the root parser's sub-commands (``commands``); its
    commands run with a ``JobReindexer`` of the job store (``tools="jobs"``)."""
    jobs = command_parser(commands, "jobs", summary="the stored jobs (reads only storage)")
    actions = jobs.add_subparsers(dest="action", required=True)
    reindex = command_parser(
        actions,
        "reindex",
        summary="write the job index's tags on jobs stored without them (once, after upgrading)",
        description=(
            "Write the job index's tags on every job stored by a version without them, so "
            "the job watchdog and the usage report see them. Reads only storage; progress "
            "goes to stderr every 1,000 jobs."
        ),
    )
    reindex.set_defaults(tools="jobs", run=reindex_command)
    reindex.add_argument(
        "--dry-run",
        action="store_true",
        help="count the untagged jobs and write nothing (default: tag them)",
    )
    reindex.add_argument(
        "--json", action="store_true", help="the counts as JSON (default: one line of text)"
    )
