"""Headless Chromium for the stack tests (Debian's browser through its own chromedriver: nothing is
downloaded), a page with waits for a single-page app, and the Airflow UI's login."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = Path(os.environ["PIPELINE_TEST_HOME"]) / "screenshots"


@contextmanager
def chromium(work: Path) -> Iterator[Any]:
    """A headless Chromium driven by Selenium, its profile and driver log under ``work``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail(f"{CHROMIUM} or {CHROMEDRIVER} is missing: run scripts/system_packages.sh")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1440,900",
                f"--user-data-dir={work / 'chromium'}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER, log_output=str(work / "driver.log")))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The browser with waits for a single-page app, and a screenshot of every step in ``folder``
    (``SCREENSHOTS`` unless given), each name prefixed with its step's number and ``prefix``."""

    def __init__(self, driver: Any, timeout: float = 60, folder: Path = SCREENSHOTS, prefix: str = "") -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.wait = WebDriverWait(driver, timeout)
        self.folder, self.prefix = folder, prefix
        self.shots: list[Path] = []

    def text(self, text: str) -> Any:
        """Wait until an element showing ``text`` is on the page; return the innermost one."""
        from selenium.webdriver.common.by import By

        xpath = f"//*[contains(normalize-space(text()), {json.dumps(text)})]"
        return self.wait.until(lambda d: d.find_element(By.XPATH, xpath))

    def shot(self, name: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{self.prefix}{len(self.shots) + 1:02d}-{name}.png"
        assert self.driver.save_screenshot(str(path)), path
        self.shots.append(path)
        return path

    def keep_failure(self) -> None:
        """A screenshot and the page's HTML of the step that failed, beside the others."""
        self.shot("failed")
        (self.folder / f"{self.prefix}failed.html").write_text(self.driver.page_source)

    def log_in(self, airflow: Any) -> None:
        """Log in to the Airflow UI as ``admin`` the way a person does (the simple auth manager's
        form, the password it generated); the browser then holds the UI's token cookie."""
        from selenium.webdriver.common.by import By

        self.driver.get(f"{airflow.url}/")
        self.wait.until(lambda d: "/auth/login" in d.current_url)
        self.wait.until(lambda d: d.find_element(By.NAME, "username"))  # the form drawn, not just the URL
        self.shot("login")
        password = json.loads((airflow.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        self.driver.find_element(By.NAME, "username").send_keys("admin")
        self.driver.find_element(By.NAME, "password").send_keys(password)
        self.driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        self.wait.until(lambda d: "/auth/login" not in d.current_url)

    def open_model_health(self, airflow_url: str, pipeline: str | None = None) -> None:
        """Open the Model health page of the Airflow UI at ``airflow_url`` (logged in) and enter its
        frame; with ``pipeline``, pick it in the page's pipeline picker as a person does (a stack
        serving several pipelines shows the first one) and wait for its rows."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.select import Select

        self.driver.get(f"{airflow_url}/plugin/model-health")
        frame = self.wait.until(lambda d: d.find_element(By.TAG_NAME, "iframe"))
        self.driver.switch_to.frame(frame)
        self.text("Model health")
        if pipeline is None:
            return
        picker = Select(self.wait.until(lambda d: d.find_element(By.NAME, "pipeline")))
        picker.select_by_visible_text(pipeline)
        self.driver.find_element(By.XPATH, "//button[@type='submit']").click()
        self.wait.until(lambda d: f"pipeline={pipeline}" in d.execute_script("return window.location.search"))
