"""Apps' origins: which hosts name an app, and the URLs people are given."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuslice.manager.services.apps import origins
from gpuslice.manager.services.apps.origins import AppOrigin
from gpuslice.manager.settings import AppsSettings

SID = "42c8ebae-e313-45cd-a51e-f26404c6bbb1"


def test_only_an_app_and_a_session_id_under_the_apps_domain_name_an_app() -> None:
    domain = "apps.localhost"
    assert origins.parse_host(f"jupyter--{SID}.apps.localhost:8080", domain) == AppOrigin(
        "jupyter", SID)
    assert origins.parse_host(f"8000--{SID}.APPS.localhost", domain) == AppOrigin("8000", SID)
    assert origins.parse_host(f"my-app--{SID}.apps.localhost", domain) == AppOrigin(
        "my-app", SID)
    for other in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080", f"{SID}.apps.localhost",
                  f"jupyter--{SID}.apps.localhost.evil.example", f"jupyter--{SID}.localhost",
                  f"jupyter--{SID[:-1]}.apps.localhost", f"Jupyter_--{SID}.apps.localhost",
                  f"x.jupyter--{SID}.apps.localhost"):
        assert origins.parse_host(other, domain) is None, other


def test_urls_name_the_origin_with_the_port_people_reached() -> None:
    plain = AppsSettings()
    assert origins.app_url("http://127.0.0.1:8080/", SID, "mlflow", plain) == \
        f"http://mlflow--{SID}.apps.localhost:8080/"
    assert origins.app_url("https://gpu.example.com/", SID, "8000", plain) == \
        f"https://8000--{SID}.apps.localhost/"
    cluster = AppsSettings(domain="apps.gpu.example.com", origin_port=443,
                           console_url="https://gpu.example.com/")
    assert origins.app_url("http://10.0.0.5:8080/", SID, "jupyter", cluster) == \
        f"http://jupyter--{SID}.apps.gpu.example.com:443/"
    assert origins.console_url("https", 8443, cluster) == "https://gpu.example.com"
    assert origins.console_url("http", 8080, plain) == "http://localhost:8080"


def test_a_port_range_is_first_last_of_unprivileged_ports() -> None:
    assert AppsSettings().ports() is None  # the default: name-based origins
    assert AppsSettings(port_range="20000-20002").ports() == range(20000, 20003)
    for bad in ("20-10", "abc", "30000-20000", "20000-70000", "20000"):
        with pytest.raises(ValidationError, match="apps.port_range is FIRST-LAST"):
            AppsSettings(port_range=bad)
