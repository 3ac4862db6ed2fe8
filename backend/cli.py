"""`gpucloud-backend`: serve the API, migrate the store, manage projects and API keys, run engine workers.

Everything beyond the standard library is imported inside the commands: `pip install gpucloud` installs the
Terraform provider only, and there this command must say how to get the backend, not print a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from backend.runtime import Runtime
    from backend.settings import Settings

BACKEND_EXTRA = "gpucloud[backend]"
_KEEP = object()  # set-quota: an option not given keeps the quota's value


def _settings(args: argparse.Namespace) -> Settings:
    """The command's settings: its flags over the `GPUCLOUD_*` environment, read once (the first call
    reads and installs them for this process; later calls return the same object)."""
    from backend.runtime import configure_process
    from backend.settings import Settings

    found = getattr(args, "settings", None)
    if isinstance(found, Settings):
        return found
    flags = (("host", "host"), ("port", "port"), ("tls_cert_file", "tls_cert"), ("tls_key_file", "tls_key"))
    overrides = {name: getattr(args, flag) for name, flag in flags if getattr(args, flag, None) is not None}
    args.settings = settings = Settings(**overrides)
    configure_process(settings)
    return settings


def _runtime(args: argparse.Namespace) -> Runtime:
    """The command's runtime, on its settings (the caller checked the data dir and store first)."""
    from backend.runtime import build_runtime

    return build_runtime(_settings(args))


def _migrate(settings: Settings) -> None:
    from backend.store.db import make_engine
    from backend.store.migrate import upgrade_to_head

    engine = make_engine(settings)
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()


def _prepare_data_dir(settings: Settings, *, create: bool = True) -> None:
    """Before a command opens the store or the key file: refuse an unsafe data dir (DataDirError, which
    `_run` prints as one message; nothing is created or changed), create a missing one 0700, tighten one
    that others can read (and say so). The rules and why: backend/store/data_dir.py."""
    from backend.store.data_dir import prepare_data_dir

    tightened = prepare_data_dir(settings.data_dir, create=create)
    if tightened:
        print(f"gpucloud-backend: others could read the data dir; tightened {', '.join(tightened)}",
              file=sys.stderr)


def _prepare_store(settings: Settings) -> None:
    """Before a long-running process starts: the data dir is checked, then an SQLite store is created and
    migrated (one machine owns the file); any other store must already be at this version's schema,
    migrated once by `migrate` (replicas migrating at start would race each other, and an old replica
    could start on a newer schema). Raises SchemaNotCurrent with the command to run."""
    from backend.store.db import make_engine
    from backend.store.migrate import check_schema_current

    _prepare_data_dir(settings)
    if settings.is_sqlite:
        _migrate(settings)
        return
    engine = make_engine(settings)
    try:
        check_schema_current(engine)
    finally:
        engine.dispose()


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the API under uvicorn; the default SQLite store is created and migrated on first start."""
    import uvicorn

    from backend.api.http_server import ProblemH11Protocol
    from backend.app import create_app

    settings = _settings(args)
    problem = _driver_problem(settings)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    tls_problem = _tls_problem(settings)
    if tls_problem is not None:
        print(f"gpucloud-backend serve: {tls_problem}", file=sys.stderr)
        return 2
    _prepare_store(settings)
    app = create_app(_runtime(args))  # the app's lifespan closes the runtime
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        ssl_certfile=settings.tls_cert_file,
        ssl_keyfile=settings.tls_key_file,
        access_log=False,
        log_level="warning",
        lifespan="on",
        http=ProblemH11Protocol,  # its 400 for an unparsable request is problem+json too
    )
    return 0


def _tls_problem(settings: Settings) -> str | None:
    """Why the TLS settings cannot work (one message naming the flag), or None."""
    given = {"--tls-cert (GPUCLOUD_TLS_CERT_FILE)": settings.tls_cert_file,
             "--tls-key (GPUCLOUD_TLS_KEY_FILE)": settings.tls_key_file}
    missing = [name for name, path in given.items() if path is None]
    if len(missing) == 1:
        return f"HTTPS needs both a certificate and its key: {missing[0]} is not set"
    for name, path in given.items():
        if path is not None and not path.is_file():
            return f"{name}: no such file {str(path)!r}"
    return None


def _driver_problem(settings: Settings) -> str | None:
    """Why the configured provisioning driver cannot run on this machine (one message), or None."""
    from backend.provisioning.drivers import DRIVERS

    entry = DRIVERS.get(settings.engine.driver)
    problem = entry.host_problem() if entry is not None else None
    if problem is None:
        return None
    return f"gpucloud-backend: GPUCLOUD_DRIVER={settings.engine.driver} cannot run here: {problem}"


def cmd_doctor(args: argparse.Namespace) -> int:
    """Say, for every driver, whether it can run here and what to do when not, and whether the data dir
    is safe to use; exit 1 when the configured driver cannot run or the data dir is unsafe."""
    from backend.provisioning.drivers import DRIVERS
    from backend.store.data_dir import data_dir_problems

    settings = _settings(args)
    data_dir = settings.data_dir.expanduser()
    unsafe = data_dir_problems(data_dir)
    configured = settings.engine.driver
    verdicts = {name: entry.host_problem() for name, entry in DRIVERS.items()}
    for name in DRIVERS:
        mark = " (configured: GPUCLOUD_DRIVER)" if name == configured else ""
        problem = verdicts.get(name)
        print(f"{name}{mark}: " + ("ok" if problem is None else f"cannot run here: {problem}"))
    print(f"data dir {data_dir} (GPUCLOUD_DATA_DIR): "
          + ("ok" if not unsafe else "unsafe, serve and every other command refuse it:"))
    for problem in unsafe:
        print(f"  {problem}")
    if configured not in DRIVERS:
        print(f"GPUCLOUD_DRIVER={configured} is not a driver (available: {', '.join(DRIVERS)})")
        return 1
    return 0 if verdicts[configured] is None and not unsafe else 1


def cmd_fault(args: argparse.Namespace) -> int:
    """Make a node of a local-driver cluster fail for real (its slurmd is killed; xid also logs an XID)."""
    from backend.provisioning.drivers.local.driver import LocalDriver, local_root
    from backend.provisioning.drivers.local.faults import inject_fault

    settings = _settings(args)
    if settings.engine.driver != "local":
        print("gpucloud-backend fault: needs GPUCLOUD_DRIVER=local (the simulated driver's faults are set "
              "with GPUCLOUD_SIMULATION_XID_RATE and the other GPUCLOUD_SIMULATION_* rates)", file=sys.stderr)
        return 2
    engine, sessions = _with_write_session(settings)
    try:
        with sessions() as session:
            done = inject_fault(session, LocalDriver(local_root(settings.data_dir), check_host=False),
                                args.cluster, args.node, args.kind)
    except LookupError as error:
        print(f"gpucloud-backend fault: {error}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print(done)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply the Alembic migrations to the configured database."""
    settings = _settings(args)
    _prepare_data_dir(settings)
    _migrate(settings)
    print(f"migrated {settings.resolved_database_url.split('@')[-1]}", file=sys.stderr)
    return 0


def _with_write_session(settings: Settings) -> tuple[Engine, sessionmaker[Session]]:
    """Engine and write sessions of a one-off command's runtime (the data dir checked first); a fresh
    SQLite store is created and migrated. Disposing the engine closes the runtime."""
    from backend.runtime import build_runtime

    _prepare_data_dir(settings)
    if settings.is_sqlite:
        _migrate(settings)
    runtime = build_runtime(settings)
    return runtime.db, runtime.write_sessions


def cmd_create_project(args: argparse.Namespace) -> int:
    """Create a project and print its id."""
    from backend.services import auth
    from backend.services.unit_of_work import operator_write

    settings = _settings(args)
    engine, sessions = _with_write_session(settings)
    try:
        with operator_write(sessions) as work:
            project = auth.create_project(session=work.session, name=args.name)
            work.audited("project.create", project_id=project.id, resource_type="project",
                         resource_id=project.id, details={"name": args.name})
    finally:
        engine.dispose()
    print(project.id)
    return 0


def cmd_create_api_key(args: argparse.Namespace) -> int:
    """Create an API key and print it alone on stdout (shown once; only its digest is stored)."""
    from backend.domain.access import Scope
    from backend.services import auth
    from backend.services.unit_of_work import operator_write

    try:
        scope = Scope.parse(args.scope) if args.scope is not None else None
    except ValueError as error:
        print(f"error: --scope: {error}", file=sys.stderr)
        return 2
    settings = _settings(args)
    engine, sessions = _with_write_session(settings)
    try:
        with operator_write(sessions) as work:
            row, plaintext = auth.create_api_key(
                session=work.session, project_name=args.project, role=args.role, scope=scope
            )
            details = {"prefix": row.prefix, "role": row.role, "scope": str(scope) if scope else None}
            work.audited("api_key.create", project_id=row.project_id, resource_type="api_key",
                         resource_id=row.id, details=details)
    finally:
        engine.dispose()
    print(plaintext)
    return 0


def cmd_revoke_api_key(args: argparse.Namespace) -> int:
    """Revoke the API key whose prefix (its first 12 characters) is given."""
    from backend.services import auth
    from backend.services.unit_of_work import operator_write

    settings = _settings(args)
    engine, sessions = _with_write_session(settings)
    try:
        with operator_write(sessions) as work:
            row = auth.revoke_api_key(session=work.session, prefix=args.prefix)
            work.audited("api_key.revoke", project_id=row.project_id, resource_type="api_key",
                         resource_id=row.id, details={"prefix": row.prefix})
    finally:
        engine.dispose()
    print(f"revoked {row.prefix}", file=sys.stderr)
    return 0


def _quota_limit(kind: str) -> Callable[[str], int | None]:
    """An argparse type: a count (`int`) or a USD amount (`usd`, returned in micro-dollars) of 0 or
    more, or `none` to clear the quota."""

    def parse(text: str) -> int | None:
        from backend.billing.money import usd_to_micros

        if text.strip().lower() == "none":
            return None
        what = "a whole number" if kind == "int" else "an amount in USD with at most six decimals"
        try:
            value = int(text) if kind == "int" else usd_to_micros(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} (or none to clear the quota)") from None
        if not 0 <= value < 2**31 * (1 if kind == "int" else 10**6):
            raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more, and below 2^31 (or none to clear)")
        return value

    return parse


def cmd_set_quota(args: argparse.Namespace) -> int:
    """Set or clear (`none`) a project's quotas; omitted ones keep their value. Prints the result."""
    from sqlalchemy import select

    from backend.domain.quotas import usd
    from backend.services import quotas
    from backend.services.unit_of_work import operator_write
    from backend.store.models import Project

    changes: dict[str, int | None] = {}
    for option, field in (("max_gpus", "max_gpus"), ("max_clusters", "max_clusters"),
                          ("max_hourly_usd", "max_hourly_micros")):
        value = getattr(args, option)
        if value is not _KEEP:
            changes[field] = value
    if not changes:
        print("error: give at least one of --max-gpus, --max-clusters, --max-hourly-usd (a value, or none "
              "to clear it)", file=sys.stderr)
        return 2
    settings = _settings(args)
    engine, sessions = _with_write_session(settings)
    try:
        with operator_write(sessions) as work:
            project = work.session.scalars(select(Project).where(Project.name == args.project)).first()
            if project is None:
                print(f"error: no project named {args.project!r}", file=sys.stderr)
                return 1
            row = quotas.set_quota(session=work.session, project_id=project.id, changes=changes)
            shown = {
                "max_gpus": row.max_gpus,
                "max_clusters": row.max_clusters,
                "max_hourly_usd": None if row.max_hourly_micros is None else str(usd(row.max_hourly_micros)),
            }
            work.audited("project.set_quota", project_id=project.id, resource_type="project",
                         resource_id=project.id, details=shown)
    finally:
        engine.dispose()
    print(" ".join(f"{name}={'none' if value is None else value}" for name, value in shown.items()))
    return 0


def cmd_set_billing_mode(args: argparse.Namespace) -> int:
    """Set a project's billing mode (prepaid | postpaid); prints the mode. Credits never change it."""
    from sqlalchemy import select

    from backend.billing.account import set_billing_mode
    from backend.domain.clock import utcnow
    from backend.services.unit_of_work import operator_write
    from backend.store.models import Project

    settings = _settings(args)
    engine, sessions = _with_write_session(settings)
    try:
        with operator_write(sessions) as work:
            project = work.session.scalars(select(Project).where(Project.name == args.project)).first()
            if project is None:
                print(f"error: no project named {args.project!r}", file=sys.stderr)
                return 1
            previous = set_billing_mode(work.session, project_id=project.id, mode=args.mode, now=utcnow())
            work.audited("project.set_billing_mode", project_id=project.id, resource_type="project",
                         resource_id=project.id, details={"billing_mode": args.mode, "previous": previous})
    finally:
        engine.dispose()
    print(f"billing_mode={args.mode}")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run one provisioning engine worker until SIGTERM/SIGINT (deployments with several processes)."""
    from backend.logging import configure_logging
    from backend.provisioning.worker import run_forever

    settings = _settings(args)
    problem = _driver_problem(settings)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    _prepare_store(settings)
    configure_logging(settings.log_level)
    runtime = _runtime(args)
    try:
        run_forever(runtime.engine_worker())
    finally:
        runtime.close()
    return 0


def cmd_generate_secret_key(args: argparse.Namespace) -> int:
    """Print a fresh key for GPUCLOUD_SECRET_KEY (base64url of 32 random bytes)."""
    from backend.store.secrets import generate_key

    print(generate_key())
    return 0


def cmd_rotate_secret_key(args: argparse.Namespace) -> int:
    """Re-encrypt every stored secret with GPUCLOUD_SECRET_KEY (earlier keys in _KEYS_PREVIOUS)."""
    from backend.store.secrets import rotate_secrets

    settings = _settings(args)
    engine, sessions = _with_write_session(settings)
    try:
        resealed, total = rotate_secrets(sessions=sessions, settings=settings)
    finally:
        engine.dispose()
    print(f"re-encrypted {resealed} of {total} stored secrets with the current key", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from backend.billing import cli as billing_cli

    parser = argparse.ArgumentParser(prog="gpucloud-backend", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP API")
    serve.add_argument("--host", default=None, help="listen address (default 127.0.0.1 or GPUCLOUD_HOST)")
    serve.add_argument("--port", type=int, default=None, help="listen port (default 8080 or GPUCLOUD_PORT)")
    serve.add_argument("--tls-cert", type=Path, default=None, metavar="PEM",
                       help="serve HTTPS with this certificate chain (default GPUCLOUD_TLS_CERT_FILE; "
                       "Terraform's provider registry needs HTTPS)")
    serve.add_argument("--tls-key", type=Path, default=None, metavar="PEM",
                       help="the certificate's private key (default GPUCLOUD_TLS_KEY_FILE)")
    serve.set_defaults(func=cmd_serve)
    commands.add_parser("migrate", help="apply database migrations").set_defaults(func=cmd_migrate)
    project = commands.add_parser("create-project", help="create a project, print its id")
    project.add_argument("name")
    project.set_defaults(func=cmd_create_project)
    key = commands.add_parser("create-api-key", help="create an API key, print it")
    key.add_argument("--project", required=True, help="project name")
    key.add_argument("--role", required=True, choices=["viewer", "member", "operator", "admin"],
                     help="viewer (read), operator (viewer + scale, attach/detach, node actions, labels), "
                     "admin (everything); member is an alias of viewer")
    key.add_argument("--scope", default=None, metavar="LABEL=VALUE",
                     help="limit the key to resources carrying this label, e.g. team=nlp (default: the "
                     "whole project)")
    key.set_defaults(func=cmd_create_api_key)
    revoke = commands.add_parser("revoke-api-key", help="revoke an API key by its prefix")
    revoke.add_argument("prefix", help="the key's first 12 characters, e.g. gpc_AbCdEfGh")
    revoke.set_defaults(func=cmd_revoke_api_key)
    quota = commands.add_parser("set-quota", help="set or clear a project's quotas (see GET /v1/quotas)")
    quota.add_argument("--project", required=True, help="project name")
    for option, kind, what in (("--max-gpus", "int", "GPUs its clusters may hold"),
                               ("--max-clusters", "int", "clusters it may hold"),
                               ("--max-hourly-usd", "usd", "USD per hour its clusters may cost")):
        quota.add_argument(option, type=_quota_limit(kind), default=_KEEP, metavar="N|none",
                           help=f"most {what}; none clears the quota; omitted keeps it")
    quota.set_defaults(func=cmd_set_quota)
    mode = commands.add_parser("set-billing-mode", help="make a project prepaid or postpaid (GET "
                               "/v1/billing/balance shows it)")
    mode.add_argument("--project", required=True, help="project name")
    mode.add_argument("mode", choices=["prepaid", "postpaid"],
                      help="prepaid: admission refuses what the balance does not cover, exhaustion pauses "
                      "on-demand clusters; postpaid: invoiced monthly, credits reduce the invoice")
    mode.set_defaults(func=cmd_set_billing_mode)
    commands.add_parser("worker", help="run a provisioning engine worker").set_defaults(func=cmd_worker)
    commands.add_parser(
        "generate-secret-key", help="print a new key for GPUCLOUD_SECRET_KEY"
    ).set_defaults(func=cmd_generate_secret_key)
    commands.add_parser(
        "rotate-secret-key", help="re-encrypt stored secrets with GPUCLOUD_SECRET_KEY"
    ).set_defaults(func=cmd_rotate_secret_key)
    commands.add_parser("doctor", help="check what each provisioning driver needs from this machine"
                        ).set_defaults(func=cmd_doctor)
    fault = commands.add_parser("fault", help="make a node of a local-driver cluster fail for real")
    fault.add_argument("--cluster", required=True, help="cluster id")
    fault.add_argument("--node", required=True, help="node name, e.g. train-1")
    fault.add_argument("kind", choices=["xid", "crash"],
                       help="crash: kill slurmd; xid: log an XID and kill slurmd")
    fault.set_defaults(func=cmd_fault)
    billing_cli.add_subcommands(commands, open_runtime=_runtime)  # add-credits, billing-run
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    try:
        return _run(argv)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.partition(".")[0] in ("backend", "provider"):
            raise  # our own code is broken: that is a bug, keep the traceback
        print(
            f"gpucloud-backend: the backend's dependencies are not installed (no module named "
            f"{error.name!r}). This environment has the Terraform provider only; install the backend "
            f"with: pip install '{BACKEND_EXTRA}'",
            file=sys.stderr,
        )
        return 1


def _run(argv: Sequence[str] | None) -> int:
    from backend.domain.errors import ApiError
    from backend.runtime import CatalogFileError
    from backend.store.data_dir import DataDirError
    from backend.store.migrate import SchemaNotCurrent

    args = build_parser().parse_args(argv)
    try:
        if args.command == "billing-run":
            _prepare_store(_settings(args))
        elif args.command == "add-credits":  # opens the store itself (backend/billing/cli.py)
            _prepare_data_dir(_settings(args), create=False)
        code: int = args.func(args)
    except DataDirError as error:
        print(f"gpucloud-backend {args.command}: unsafe data dir: {error}", file=sys.stderr)
        return 1
    except ApiError as error:
        print(f"error: {error.detail}", file=sys.stderr)
        return 1
    except SchemaNotCurrent as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except CatalogFileError as error:
        print(f"gpucloud-backend {args.command}: {error}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
