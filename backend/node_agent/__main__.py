"""`python -m backend.node_agent`: print one reading of this node as JSON on stdout."""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
from datetime import datetime, timezone
from typing import Any

from backend.node_agent.host import read_host
from backend.node_agent.links import read_links
from backend.node_agent.nvidia import read_gpus
from backend.node_agent.topology import read_cpu_layout
from backend.node_agent.xid import read_xid_events


def reading() -> dict[str, Any]:
    """Everything the agent reports about this node now."""
    gpus = read_gpus()
    xid_events, xid_unavailable = read_xid_events(gpus.devices) if gpus.devices else ([], None)
    layout = read_cpu_layout(tuple(gpu.pci_bus_id for gpu in gpus.devices))
    return {
        "node": socket.gethostname(),
        "read_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gpus": dataclasses.asdict(gpus),
        "xid_events": [dataclasses.asdict(event) for event in xid_events],
        "xid_unavailable_reason": xid_unavailable,
        "host": dataclasses.asdict(read_host()),
        "links": dataclasses.asdict(read_links(has_gpus=bool(gpus.devices))),
        "cpu_layout": dataclasses.asdict(layout) if layout is not None else None,
    }


def main() -> None:
    json.dump(reading(), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
