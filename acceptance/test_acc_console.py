"""The web console in a real headless Chromium against the real backend (simulated datacenter at 600x):
sign in, open a cluster, visit every tab and page, see a chart drawn from data, restart a node through
the confirmation dialog (the API records it), attach a volume, and see every XSS probe (a cluster
label, a volume name, an SSH key name, and a log line: the key's comment, which cloud-init prints at
boot) shown as text. One browser for the module; a screenshot of each tab goes to the artifacts
directory ($GPUCLOUD_TEST_ARTIFACTS, default .artifacts/) under console/."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from acceptance.backend import Backend, running_backend
from tests.backend.keys import ed25519_key

REPO = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"  # Debian's, as .ci/run installs
FAST_SIMULATION = {
    "GPUCLOUD_SIMULATION_SPEED": "600",
    "GPUCLOUD_SIMULATION_BOOT_FAILURE_RATE": "0",
    "GPUCLOUD_SIMULATION_ACCEPTANCE_FAILURE_RATE": "0",
    "GPUCLOUD_LOG_LEVEL": "info",  # one line per request: the test checks none holds the key
}
LABEL_PROBE = "<script>alert('label')</script>"
VOLUME_PROBE = '<img src=x onerror="alert(1)">'
KEY_PROBE = "<script>alert('key')</script>"
LOG_PROBE = "<script>alert('log')</script>"
TABS = ("overview", "jobs", "monitoring", "nodes", "logs", "volumes", "network")
WAIT_SECONDS = 20


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAST_SIMULATION.items():
            patch.setenv(name, value)
        with running_backend(tmp_path_factory.mktemp("console-backend")) as server:
            yield server


@pytest.fixture(scope="module")
def api(backend: Backend) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{backend.url}/v1", timeout=30,
                      headers={"Authorization": f"Bearer {backend.api_key}"}) as client:
        yield client


@pytest.fixture(scope="module")
def world(api: httpx.Client) -> dict[str, Any]:
    """A running 2-node cluster with a probe label and a probe SSH key, and a free probe volume."""
    key = api.post("/ssh-keys", json={"name": KEY_PROBE, "public_key": ed25519_key(LOG_PROBE)})
    volume = api.post("/volumes", json={"name": VOLUME_PROBE, "region": "us-east-1", "size_tib": 2})
    assert key.status_code == 201 and volume.status_code == 201, (key.text, volume.text)
    cluster = api.post("/clusters", json={
        "name": "console", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
        "ssh_key_ids": [key.json()["id"]], "labels": {"probe": LABEL_PROBE}, "node_repair": "manual"})
    assert cluster.status_code == 201, cluster.text
    cid = cluster.json()["id"]
    # RUNNING, with at least two GPU samples per node so the Monitoring chart has lines to draw.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status = api.get(f"/clusters/{cid}").json()["status"]
        series = api.get(f"/clusters/{cid}/metrics", params={"window": "5m"}).json()["series"]
        if status == "RUNNING" and series and all(
            sum(v is not None for v in s["gpu_utilization_pct"]) >= 2 for s in series
        ):
            break
        time.sleep(1)
    else:
        pytest.fail(f"cluster {cid} not RUNNING with metrics within 90 s: {status}")
    return {"cluster_id": cid, "volume_id": volume.json()["id"], "key_id": key.json()["id"]}


def artifacts_dir() -> Path:
    root = Path(os.environ.get("GPUCLOUD_TEST_ARTIFACTS") or REPO / ".artifacts")
    directory = root / "console"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def artifacts() -> Path:
    return artifacts_dir()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000",
                     "--force-prefers-reduced-motion", "--lang=en-GB"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: WebDriver, what: Callable[[WebDriver], Any], message: str) -> Any:
    # Pages redraw what they refresh, so an element found a moment ago may be gone: look again.
    waiter = WebDriverWait(driver, WAIT_SECONDS, poll_frequency=0.1,
                           ignored_exceptions=(StaleElementReferenceException, NoSuchElementException))
    try:
        return waiter.until(what, message)
    except TimeoutException:
        driver.save_screenshot(str(artifacts_dir() / "timed-out.png"))  # what the page showed instead
        raise


def visible(driver: WebDriver, css: str) -> WebElement:
    found: WebElement = wait_for(
        driver, lambda d: next((e for e in d.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()), False),
        f"no visible {css}")
    return found


def assert_no_alert(driver: WebDriver) -> None:
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018 (an alert would mean a probe ran)
    # The only script on the page is the console's own module: no probe became an element.
    assert driver.execute_script("return document.querySelectorAll('script').length") == 1
    assert driver.execute_script("return document.querySelectorAll('img').length") == 0


def selected(driver: WebDriver, css: str) -> bool:
    return driver.find_element(By.CSS_SELECTOR, css).get_attribute("aria-selected") == "true"


def panel_text(driver: WebDriver) -> str:
    text: str = driver.find_element(By.ID, "cluster-panel").text
    return text


def texts(driver: WebDriver, css: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def open_tab(driver: WebDriver, name: str) -> None:
    driver.find_element(By.ID, f"tab-{name}").click()
    wait_for(driver, lambda d: selected(d, f"#tab-{name}"), f"tab {name} not selected")
    wait_for(driver, lambda d: "Loading" not in panel_text(d), f"{name} still loading")


def test_acc_console_tour(
    browser: webdriver.Chrome, backend: Backend, api: httpx.Client, world: dict[str, Any], artifacts: Path
) -> None:
    cid = world["cluster_id"]
    browser.get(f"{backend.url}/console")
    visible(browser, "#api-key").send_keys(backend.api_key)
    browser.find_element(By.ID, "sign-in").click()
    link = visible(browser, f"a[href='#/clusters/{cid}/overview']")
    assert browser.execute_script("return sessionStorage.getItem('gpucloud.apiKey')") == backend.api_key
    assert browser.get_cookies() == []
    chip = browser.find_element(By.CSS_SELECTOR, ".chip")
    assert chip.text == f"probe={LABEL_PROBE}"
    browser.save_screenshot(str(artifacts / "clusters.png"))

    link.click()
    wait_for(browser, lambda d: d.find_element(By.ID, "cluster-name").text == "console", "cluster header")
    assert browser.find_element(By.CSS_SELECTOR, ".cluster-head .chip").text == f"probe={LABEL_PROBE}"

    open_tab(browser, "overview")
    labels = texts(browser, "#cluster-panel .card-label")
    cards = dict(zip(labels, texts(browser, "#cluster-panel .card-value"), strict=True))
    assert cards["Total GPUs"] == "16" and cards["Idle nodes"].endswith("/ 2")
    assert cards["Avg GPU utilisation"].endswith("%") and "GiB" in cards["GPU memory"]
    visible(browser, "#cluster-panel table")  # node health and the Slurm partition
    browser.save_screenshot(str(artifacts / "overview.png"))

    browser.find_element(By.ID, "tab-overview").send_keys(Keys.ARROW_RIGHT)  # keyboard: the next tab
    wait_for(browser, lambda d: selected(d, "#tab-jobs") and d.switch_to.active_element.get_attribute("id")
             == "tab-jobs", "arrow key did not move to Jobs")
    open_tab(browser, "jobs")
    running = "#cluster-panel [role=tab][data-value=running]"
    visible(browser, running).click()
    wait_for(browser, lambda d: selected(d, running), "RUNNING filter")
    browser.save_screenshot(str(artifacts / "jobs.png"))

    open_tab(browser, "monitoring")
    visible(browser, "#cluster-panel [role=tab][data-value='5m']").click()  # the window selector
    wait_for(browser, lambda d: "last 5m" in panel_text(d), "5m window")
    drawn = wait_for(browser, lambda d: [p for p in d.find_elements(By.CSS_SELECTOR, "svg.chart path.line")
                                         if "L" in (p.get_attribute("d") or "")], "no line drawn")
    assert {p.get_attribute("data-series") for p in drawn} >= {"console-0", "console-1"}
    browser.save_screenshot(str(artifacts / "monitoring.png"))

    open_tab(browser, "nodes")
    card = visible(browser, "[data-node='console-0']")
    card.find_element(By.CSS_SELECTOR, "details.drill summary").click()
    assert len(card.find_elements(By.CSS_SELECTOR, "details.drill tbody tr")) == 8  # per-GPU drill-down
    card.find_element(By.CSS_SELECTOR, "button[data-action=restart]").click()
    dialog = visible(browser, "#confirm-dialog")
    assert "console-0" in dialog.text
    browser.save_screenshot(str(artifacts / "nodes-confirm.png"))
    browser.find_element(By.ID, "confirm-ok").click()
    visible(browser, ".notice-ok")
    events = api.get("/audit-events", params={"action": "cluster.node_restart", "resource_id": cid}).json()
    assert len(events["items"]) == 1, events  # the API saw exactly the one confirmed restart
    browser.save_screenshot(str(artifacts / "nodes.png"))

    open_tab(browser, "logs")
    Select(browser.find_element(By.ID, "log-source")).select_by_value("console-0")
    log = wait_for(browser, lambda d: (e := d.find_element(By.ID, "log-lines")) and LOG_PROBE in e.text and e,
                   "the key's comment never showed in the node log")
    assert any(line.endswith(LOG_PROBE) and "ci-info" in line for line in log.text.splitlines())
    browser.find_element(By.ID, "log-auto").click()  # auto-refresh on, then off again
    browser.find_element(By.ID, "log-auto").click()
    downloaded = artifacts / "console-console-0.log"
    downloaded.unlink(missing_ok=True)
    allow = {"behavior": "allow", "downloadPath": str(artifacts)}
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", allow)
    browser.find_element(By.ID, "log-download").click()
    wait_for(browser, lambda d: downloaded.is_file() and LOG_PROBE in downloaded.read_text(), "no download")
    browser.save_screenshot(str(artifacts / "logs.png"))

    open_tab(browser, "volumes")
    Select(visible(browser, "#attach-volume")).select_by_value(world["volume_id"])
    browser.find_element(By.ID, "attach-button").click()
    wait_for(browser, lambda d: VOLUME_PROBE in panel_text(d)
             and not d.find_elements(By.ID, "attach-volume"), "volume not shown as attached")
    assert api.get(f"/clusters/{cid}").json()["volume_ids"] == [world["volume_id"]]
    browser.save_screenshot(str(artifacts / "volumes.png"))
    visible(browser, "#cluster-panel button[aria-label^='Detach']").click()
    visible(browser, "#confirm-ok").click()
    visible(browser, "#attach-volume")  # free again
    assert api.get(f"/clusters/{cid}").json()["volume_ids"] == []

    open_tab(browser, "network")
    assert KEY_PROBE in browser.find_element(By.ID, "cluster-panel").text
    assert "ssh -J ubuntu@" in browser.find_element(By.ID, "cluster-panel").text
    browser.save_screenshot(str(artifacts / "network.png"))
    assert_no_alert(browser)


def test_acc_console_pages(
    browser: webdriver.Chrome, backend: Backend, world: dict[str, Any], artifacts: Path
) -> None:
    # From the console's own address: the tour ends with a download, after which the tab has been seen
    # blank (CI); the key stays in the tab's sessionStorage.
    browser.get(f"{backend.url}/console")
    visible(browser, "#nav a[href='#/volumes']").click()
    wait_for(browser, lambda d: VOLUME_PROBE in texts(d, "td[data-label=Name]"), "volume probe not shown")
    browser.save_screenshot(str(artifacts / "page-volumes.png"))

    visible(browser, "#nav a[href='#/ssh-keys']").click()
    wait_for(browser, lambda d: KEY_PROBE in texts(d, "td[data-label=Name]"), "key probe not shown")
    assert LOG_PROBE in texts(browser, "td[data-label=Comment]")
    browser.save_screenshot(str(artifacts / "page-ssh-keys.png"))

    visible(browser, "#nav a[href='#/billing']").click()
    visible(browser, "svg.chart")
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar")) >= 14  # one bar per day
    browser.save_screenshot(str(artifacts / "page-billing.png"))
    assert_no_alert(browser)

    # Phone width, dark theme: the overview still reads (stacked cards, tables as rows).
    browser.set_window_size(390, 900)
    browser.get(f"{backend.url}/console#/clusters/{world['cluster_id']}/overview")
    visible(browser, "#cluster-panel .card")
    theme = "return document.documentElement.dataset.theme"
    before = browser.execute_script(theme)
    browser.find_element(By.ID, "theme-toggle").click()
    assert {before, browser.execute_script(theme)} == {"light", "dark"}
    browser.save_screenshot(str(artifacts / "overview-phone.png"))
    browser.set_window_size(1280, 1000)

    logged: list[dict[str, Any]] = browser.get_log("browser")  # type: ignore[no-untyped-call]
    errors = [e for e in logged if e["level"] == "SEVERE"]
    assert not errors, errors  # no CSP violation, no failed module, no uncaught error

    server_log = (backend.data_dir / "backend.log").read_text()
    assert '"path": "/console/static/js/app.js"' in server_log  # requests are logged...
    assert backend.api_key[12:] not in server_log  # ...with the key's 12-character prefix at most




def test_acc_console_aggregates(browser: WebDriver, backend: Backend) -> None:
    """The figures the console computes from API answers (cards, billing sums, chart gaps, the default
    window) and its dropping of out-of-order answers, run in the browser on the modules as served."""
    if not browser.current_url.startswith(f"{backend.url}/console"):
        browser.get(f"{backend.url}/console")
    result = browser.execute_async_script(Path(__file__).with_name("console_aggregates.js").read_text())
    assert "error" not in result, result
    assert result["summary"] == {
        "totalGpus": 16, "allocatedGpus": 6, "avgUtilisation": 75, "memoryUsedMib": 1000,
        "memoryTotalMib": 3000, "runningJobs": 1, "pendingJobs": 2, "idleNodes": 1,
    }
    assert result["days"] == 14 and result["lastDays"] == [["2026-11-25", 2.5], ["2026-11-26", 5.5]]
    assert result["byCluster"] == [["cls_a", 12.75], ["cls_b", 4], ["storage", 0.25]]
    assert result["path"].count("M") == 2 and result["path"].count("L") == 1  # the gap breaks the line
    assert result["windows"] == ["5m", "15m", "1h"]
    assert result["answers"] == ["stale", "new"]  # a late answer never overwrites a newer one


def test_acc_console_csp_blocks_inline_script(browser: WebDriver, backend: Backend) -> None:
    """Chromium enforces the policy: a script element injected with inline code does not run (what
    any markup slipping past the escaping would meet)."""
    browser.get(f"{backend.url}/console")
    browser.execute_script(
        "const s = document.createElement('script'); s.textContent = 'window.inlineRan = true';"
        "document.body.append(s);"
    )
    assert browser.execute_script("return window.inlineRan === undefined") is True
