"""The real Prometheus used by the integration tests starts on loopback and answers queries."""

from tests.support.prom import PrometheusServer


def test_prometheus_starts_and_scrapes_itself(tmp_path):
    with PrometheusServer(tmp_path) as prom:
        # Scrape itself: the "up" series for the self-scrape job proves scraping works.
        assert prom.url.startswith("http://127.0.0.1:")
        assert prom.query("vector(1)")[0]["value"][1] == "1"
