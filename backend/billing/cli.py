"""`gpucloud-backend` subcommands of billing: `add-credits` and `billing-run`.

`backend.cli.build_parser` registers them with `add_subcommands(commands, open_runtime=...)`: the
commands run on the process's runtime (billing sits below it, so they see it through `BillingRuntime`).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from backend.billing.ledger import balance_micros, grant_credits
from backend.billing.money import micros_to_usd, usd_to_micros
from backend.billing.worker import MeteringLoop
from backend.domain.clock import Clock


class BillingRuntime(Protocol):
    """What the billing commands use of `backend.runtime.Runtime`."""

    @property
    def write_sessions(self) -> sessionmaker[Session]: ...

    @property
    def clock(self) -> Clock: ...

    def metering_loop(self) -> MeteringLoop: ...

    def close(self) -> None: ...


OpenRuntime = Callable[[argparse.Namespace], BillingRuntime]


def _amount(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not an amount in USD: {text!r}") from None
    if not value.is_finite() or value <= 0:
        raise argparse.ArgumentTypeError("the amount must be a positive number of USD")
    return value


def cmd_add_credits(args: argparse.Namespace, runtime: BillingRuntime) -> int:
    """Add credits to a project (by name); prints the new balance."""
    from sqlalchemy import select

    from backend.billing.actions import record_audit
    from backend.store.models import Project

    try:
        micros = usd_to_micros(args.amount_usd)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    with runtime.write_sessions.begin() as session:
        project = session.scalars(select(Project).where(Project.name == args.project)).first()
        if project is None:
            print(f"error: no project named {args.project!r}", file=sys.stderr)
            return 1
        now = runtime.clock.now()
        entry, _new = grant_credits(
            session,
            project_id=project.id,
            amount_micros=micros,
            idempotency_key=args.idempotency_key or uuid.uuid4().hex,
            actor="cli",
            description=args.description,
            now=now,
        )
        record_audit(
            session,
            project_id=project.id,
            action="billing.credits_added",
            resource_type="project",
            resource_id=project.id,
            at=now,
            details={
                "amount_usd": str(micros_to_usd(entry.amount_micros)),
                "description": args.description,
            },
        )
        balance = balance_micros(session, project.id)
    print(f"balance {micros_to_usd(balance)} USD", file=sys.stderr)
    print(micros_to_usd(balance))
    return 0


def cmd_billing_run(args: argparse.Namespace, runtime: BillingRuntime) -> int:
    """Run the metering job: one pass (`--once`) or a loop until SIGTERM."""
    from backend.billing.worker import run_forever

    loop = runtime.metering_loop()
    if args.once:
        result = loop.run_once()
        print(
            f"metered {result.projects} projects, {result.records_charged} new charges "
            f"({micros_to_usd(result.micros_charged)} USD)",
            file=sys.stderr,
        )
    else:
        run_forever(loop)
    return 0


def _on_runtime(command: Callable[[argparse.Namespace, BillingRuntime], int], open_runtime: OpenRuntime
                ) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        runtime = open_runtime(args)
        try:
            return command(args, runtime)
        finally:
            runtime.close()

    return run


def add_subcommands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], *, open_runtime: OpenRuntime
) -> None:
    """Register billing's subcommands on `gpucloud-backend`'s subparsers; each runs on the runtime
    `open_runtime(args)` builds, closed when it ends."""
    credits = commands.add_parser("add-credits", help="add credits to a project, print the new balance")
    credits.add_argument("--project", required=True, help="project name")
    credits.add_argument("--amount-usd", required=True, type=_amount, help="USD to add, e.g. 500 or 12.50")
    credits.add_argument("--description", default="", help="shown in the ledger")
    credits.add_argument(
        "--idempotency-key", default=None, help="a key that makes a retried command add the credits only once"
    )
    credits.set_defaults(func=_on_runtime(cmd_add_credits, open_runtime))
    run = commands.add_parser("billing-run", help="run the billing metering job")
    run.add_argument("--once", action="store_true", help="one pass, then exit")
    run.set_defaults(func=_on_runtime(cmd_billing_run, open_runtime))
