"""hclog-shaped JSON logging on stderr."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from collections.abc import Iterator

import pytest

from provider.plugin.log import (
    TRACE,
    HclogJsonFormatter,
    configure_logging,
    hclog_level,
    level_from_environment,
    provider_level_variable,
    request_fields,
)

GPUCLOUD = "registry.terraform.io/gpucloud/gpucloud"


@pytest.mark.parametrize(
    ("environ", "level"),
    [
        ({}, logging.WARNING),
        ({"TF_LOG": "debug"}, logging.DEBUG),
        ({"TF_LOG": "JSON"}, TRACE),
        ({"TF_LOG": "trace", "TF_LOG_PROVIDER": "error"}, logging.ERROR),
        ({"TF_LOG_PROVIDER": "off"}, logging.CRITICAL + 10),
        ({"TF_LOG": "loud"}, TRACE),
    ],
)
def test_level_from_environment(environ: dict[str, str], level: int) -> None:
    assert level_from_environment(environ) == level


def test_level_from_environment_provider_variable_wins() -> None:
    environ = {"TF_LOG": "trace", "TF_LOG_PROVIDER": "debug", "TF_LOG_PROVIDER_GPUCLOUD": "warn"}
    assert level_from_environment(environ, GPUCLOUD) == logging.WARNING
    assert level_from_environment(environ) == logging.DEBUG  # no address: no provider variable
    other = {**environ, "TF_LOG_PROVIDER_GPUCLOUD": ""}
    assert level_from_environment(other, GPUCLOUD) == logging.DEBUG  # empty counts as unset
    assert provider_level_variable("registry.terraform.io/acme/gpu-cloud") == "TF_LOG_PROVIDER_GPU_CLOUD"


@pytest.mark.parametrize(
    ("levelno", "name"),
    [
        (TRACE, "trace"),
        (logging.DEBUG, "debug"),
        (logging.INFO, "info"),
        (logging.WARNING, "warn"),
        (logging.ERROR, "error"),
        (logging.CRITICAL, "error"),
    ],
)
def test_hclog_level_names(levelno: int, name: str) -> None:
    assert hclog_level(levelno) == name


def test_formatter_writes_hclog_fields_extras_and_exceptions() -> None:
    logger = logging.getLogger("gpucloud.test")
    try:
        raise ValueError("bad")
    except ValueError:
        record = logger.makeRecord(
            "gpucloud.test", logging.ERROR, __file__, 1, "failed %s", ("thing",), exc_info=sys.exc_info()
        )
    record.__dict__["cluster_id"] = "c-1"
    entry = json.loads(HclogJsonFormatter().format(record))
    assert entry["@level"] == "error"
    assert entry["@message"] == "failed thing"
    assert entry["@module"] == "gpucloud.test"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", entry["@timestamp"])
    assert entry["cluster_id"] == "c-1"
    assert "ValueError: bad" in entry["exception"]


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    chatty = {name: logging.getLogger(name).level for name in ("httpx", "httpcore", "hpack")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in chatty.items():
        logging.getLogger(name).setLevel(old)
    logging.captureWarnings(False)


@pytest.mark.usefixtures("restore_root_logger")
def test_configure_logging_filters_by_level() -> None:
    stream = io.StringIO()
    configure_logging({"TF_LOG_PROVIDER": "info"}, stream=stream)
    logging.getLogger("gpucloud.x").debug("hidden")
    logging.getLogger("gpucloud.x").info("shown")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["@level"], e["@message"]) for e in lines] == [("info", "shown")]


@pytest.mark.usefixtures("restore_root_logger")
def test_configure_logging_keeps_one_line_per_request_out_of_info_and_debug() -> None:
    stream = io.StringIO()
    for level in ("info", "debug"):
        configure_logging({"TF_LOG_PROVIDER": level}, stream=stream)
        logging.getLogger("httpx").info("HTTP Request: GET http://api/v1/clusters/c \"HTTP/1.1 200 OK\"")
        logging.getLogger("httpcore.connection").debug("connect_tcp.started")
        logging.getLogger("provider.resources.gpu_cluster").info("gpu cluster c: RUNNING")
    messages = [json.loads(line)["@message"] for line in stream.getvalue().splitlines()]
    assert messages == ["gpu cluster c: RUNNING", "gpu cluster c: RUNNING"]
    configure_logging({"TF_LOG_PROVIDER": "trace"}, stream=stream)
    logging.getLogger("httpx").info("HTTP Request: shown at trace")
    logging.getLogger("hpack.hpack").debug("Decoded (b':path', b'/tfplugin6.Provider/PlanResourceChange')")
    assert "shown at trace" in stream.getvalue()
    assert "Decoded" not in stream.getvalue()  # HTTP/2 header compression internals: never


@pytest.mark.usefixtures("restore_root_logger")
def test_configure_logging_adds_provider_address_and_request_fields() -> None:
    stream = io.StringIO()
    configure_logging({"TF_LOG": "trace"}, stream=stream, provider_address=GPUCLOUD)
    logger = logging.getLogger("gpucloud.x")
    with request_fields("ReadResource", tf_resource_type="gpucloud_ssh_key"):
        logger.info("inside")
        with request_fields("PlanResourceChange"):
            logger.info("nested")
        logger.info("inside again")
    logger.info("outside")
    inside, nested, again, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["tf_provider_addr"] == outside["tf_provider_addr"] == GPUCLOUD
    assert (inside["tf_rpc"], inside["tf_resource_type"]) == ("ReadResource", "gpucloud_ssh_key")
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", inside["tf_req_id"])
    assert nested["tf_rpc"] == "PlanResourceChange" and nested["tf_req_id"] != inside["tf_req_id"]
    assert again["tf_req_id"] == inside["tf_req_id"]
    assert not {"tf_rpc", "tf_req_id", "tf_resource_type"} & outside.keys()
