"""vLLM's example Grafana dashboard works on our frontend, through a real Prometheus.

A real Prometheus server (the Debian package ``prometheus``; .ci/run installs
it) scrapes our frontend in front of the session's real engine every second.
After a small workload, every PromQL target of vLLM's example dashboard
(``tests/data/vllm_dashboard_queries.json``, its queries as Grafana sends
them, with ``$model_name`` from the dashboard's variable query) must return
data: at least one series, and finite values (a histogram quantile or a rate
ratio is NaN when nothing was observed in the window).
"""

from __future__ import annotations

import calendar
import json
import math
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from harness.frontend import SERVED_NAME
from harness.ports import free_port
from harness.waits import wait_for
from tests.support.http_client import post, stream_completion
from tests.support.requirements import require_tool

pytestmark = pytest.mark.real_engine

QUERIES = Path(__file__).parent / "data" / "vllm_dashboard_queries.json"
# Grafana's $__rate_interval is at least 4 scrape intervals; the window here
# covers the whole test, so every rate sees the workload.
RATE_WINDOW = "2m"
SCRAPE_INTERVAL_S = 1


class Prometheus:
    def __init__(self, target: str, workdir: Path) -> None:
        binary = require_tool("prometheus", "the Prometheus server, Debian package "
                              "`prometheus`: apt-get install prometheus; .ci/run installs it")
        self.url = f"http://127.0.0.1:{free_port()}"
        config = workdir / "prometheus.yml"
        config.write_text(
            f"global: {{scrape_interval: {SCRAPE_INTERVAL_S}s, "
            f"evaluation_interval: {SCRAPE_INTERVAL_S}s}}\n"
            "scrape_configs:\n"
            "  - job_name: frontend\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n")
        self.log_path = workdir / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address={self.url.removeprefix('http://')}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log()}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str):
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def scrapes_after(self, moment: float) -> bool:
        """Whether the frontend target is up and was scraped after ``moment`` (unix s)."""
        targets = self.api("targets")["activeTargets"]
        if not targets or targets[0]["health"] != "up":
            return False
        scraped = targets[0]["lastScrape"]  # RFC 3339 UTC: 2025-11-30T21:04:05.123456789Z
        # Whole seconds: the scrape was after ``moment`` if even the truncated time is.
        return calendar.timegm(time.strptime(scraped[:19], "%Y-%m-%dT%H:%M:%S")) > moment

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def prometheus(frontend, tmp_path):
    prom = Prometheus(f"127.0.0.1:{frontend.port}", tmp_path)
    try:
        wait_for(prom.ready, 30, message=prom.log)
        yield prom
    finally:
        prom.stop()


def dashboard_queries() -> tuple[str, list[dict]]:
    data = json.loads(QUERIES.read_text())
    return data["variables"]["model_name"], data["targets"]


def test_every_query_of_vllms_dashboard_returns_data(frontend, prometheus):
    started = time.time()
    # Discovery takes a few seconds; then one scrape from before the workload.
    wait_for(lambda: prometheus.scrapes_after(started), 30,
             message=lambda: f"Prometheus never scraped the frontend:\n{prometheus.log()}")
    for body in ({"prompt": "Dashboards for everyone", "max_tokens": 6, "n": 2,
                  "temperature": 1.0, "seed": 1, "ignore_eos": True},
                 {"prompt": [1, 468, 995], "max_tokens": 5, "temperature": 0}):
        reply = post(frontend.url, "/v1/completions", {"model": SERVED_NAME, **body})
        assert reply.status == 200, reply.body[:500]
    stream_completion(frontend.url, {"prompt": "streamed", "max_tokens": 4})
    reply = post(frontend.url, "/v1/chat/completions", {
        "model": SERVED_NAME, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status == 200, reply.body[:500]
    done = time.time()
    wait_for(lambda: prometheus.scrapes_after(done + SCRAPE_INTERVAL_S), 30,
             message=lambda: f"no scrape after the workload:\n{prometheus.log()}")

    variable_query, targets = dashboard_queries()
    label = variable_query.removeprefix("label_values(").removesuffix(")")
    assert SERVED_NAME in prometheus.api(f"label/{label}/values")
    empty, not_finite = [], []
    for target in targets:
        expr = target["expr"].replace("$model_name", SERVED_NAME) \
                             .replace("$__rate_interval", RATE_WINDOW)
        result = prometheus.query(expr)
        where = f"{target['panel']} {target['refId']}: {expr}"
        if not result:
            empty.append(where)
        elif not all(math.isfinite(float(r["value"][1])) for r in result):
            not_finite.append(f"{where} -> {[r['value'][1] for r in result]}")
    assert len(targets) == 27
    assert not empty, "queries without data:\n" + "\n".join(empty)
    assert not not_finite, "queries without finite values:\n" + "\n".join(not_finite)
    # What the workload did shows as such (not just as series that exist).
    success = prometheus.query(
        f'sum(increase(vllm:request_success_total{{model_name="{SERVED_NAME}"}}'
        f'[{RATE_WINDOW}]))')
    assert float(success[0]["value"][1]) > 0
