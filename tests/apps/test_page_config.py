"""The page's configuration section (issue 68) in headless Chromium (tests/cdp.py), against a
real `edgert camera --config site.yaml --watch-config --output http://127.0.0.1:PORT` run on
rendered scenes through a real detector bundle (tests.tiny.blob_detector_bundle on ONNX
Runtime): the page shows the version and the cameras, the file edited (a zone moved) shows the
new version and the change within a few seconds, a broken file its refusal and reason, and a
camera's password (a ``${ENV}`` reference in its source) never appears in the page's text or
markup, nor in GET /config from the page's own port. The screenshot is
reports/camera_page_config.png."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from tests.apps.test_page_chromium import CHROMIUM, FLAGS
from tests.apps.test_reload import PEN, WHOLE, camera, flags, http, scene, stop, wait_for, write
from tests.conftest import ROOT
from tests.ports import free_ports
from tests.tiny import blob_detector_bundle

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
    ),
]

SECRET = "pa55-for-the-page"  # EDGERT_PAGE_PASSWORD: the third camera's password
TEXT = "document.getElementById('{}').textContent"
# the page's requests, counted: fetch wrapped before its scripts run
COUNTED = (
    "window.asked=[];const fetched=window.fetch;"
    "window.fetch=(u,o)=>{window.asked.push(String(u));return fetched(u,o);};"
)
PAGE_TEXT = "document.body.innerText+'\\n'+document.documentElement.outerHTML"


def test_the_page_shows_the_running_configuration_and_its_changes(tmp_path, monkeypatch):
    from tests.cdp import Browser

    bundle = blob_detector_bundle(tmp_path / "det")
    a, b = scene(tmp_path / "a.mp4", 60, 5), scene(tmp_path / "b.mp4", 170, -5)
    monkeypatch.setenv("EDGERT_PAGE_PASSWORD", SECRET)  # the camera's environment
    locked = "rtsp://user:${EDGERT_PAGE_PASSWORD}@127.0.0.1:9/never"  # nothing answers there
    config, port = tmp_path / "site.yaml", free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    out = f"--output {url}"  # the web viewer: the file is the whole configuration
    write(config, flags(bundle, [a, b, locked], more=out))
    proc = camera(tmp_path, config, url, "--watch-config")
    try:
        status, got = http("GET", url + "/config")  # the page's own port answers it
        v1 = got["version"]
        assert status == 200 and got["cameras"] == {"cam0": 0, "cam1": 1, "cam2": 2}
        assert got["config"]["sources"][2] == "rtsp://user:***@127.0.0.1:9/never"
        assert SECRET not in json.dumps(got)
        with Browser(CHROMIUM, FLAGS, tmp_path / "profile", height=1400) as br:
            br.open(url + "/")
            br.wait(f"{TEXT.format('cfgversion')}==={json.dumps(v1)}")
            cams = br.js(TEXT.format("cfgcameras")).splitlines()
            assert cams == ["cam0 \u2192 stream 0", "cam1 \u2192 stream 1", "cam2 \u2192 stream 2"]
            assert br.js(TEXT.format("cfglast")) == "none since the start"
            shown = br.js(TEXT.format("cfgtext"))
            assert "- rtsp://user:***@127.0.0.1:9/never" in shown, shown
            assert "zones: [" + PEN + "]" in shown, shown
            br.wait("document.getElementById('cap2').textContent.length>0")  # the tiles drawn
            # the zone moved: the file edited, the page shows the new version and the change
            write(config, flags(bundle, [a, b, locked], zone=WHOLE, more=out))
            v2 = wait_for(lambda: (got := http("GET", url + "/config")[1])["version"] != v1
                          and got["version"], 60, proc)  # fmt: skip
            t0 = time.monotonic()
            br.wait(f"{TEXT.format('cfgversion')}==={json.dumps(v2)}", 10)
            seconds = time.monotonic() - t0
            assert seconds < 5.0, seconds  # the section asks every 2 s
            last = br.js(TEXT.format("cfglast")).splitlines()
            assert f"applied (--watch-config) over {v1}, now {v2}" in last[0], last
            assert last[1:] == ["  camera cam0: zone pen edited"], last
            assert "zones: [" + WHOLE + "]" in br.js(TEXT.format("cfgtext"))
            assert "1 applied, 0 refused" in br.js(TEXT.format("cfgcounts"))
            # a broken file: refused with its reason, the running version stays
            write(config, flags(bundle, [a, b, locked], zone=WHOLE, more=out) + "no_such_key: 1\n")
            refused = br.wait(
                "document.getElementById('cfglast').className==='refused'&&"
                + TEXT.format("cfglast"),
                60,
            )
            assert "refused (--watch-config)" in refused and "no_such_key" in refused, refused
            assert br.js(TEXT.format("cfgversion")) == v2
            page = br.js(PAGE_TEXT)
            assert "user:***@127.0.0.1" in page and SECRET not in page
            br.js("document.getElementById('cfgdetails').open=true")
            br.js("document.getElementById('config').scrollIntoView()")
            time.sleep(0.5)
            assert SECRET not in br.js(PAGE_TEXT)
            shot = tmp_path / "config.png"
            br.screenshot(shot)
    finally:
        summary = stop(proc)
    assert summary["config"]["version"] == v2
    (ROOT / "reports").mkdir(exist_ok=True)
    shutil.copy(shot, ROOT / "reports" / "camera_page_config.png")


def test_a_run_without_a_configuration_hides_the_section(tmp_path):
    """A web viewer whose run answers no GET /config (404): the section stays hidden, the page
    stops asking for it, and the rest of the page works."""
    from edgert.apps.camera.sinks.web import HttpOutput
    from edgert.apps.telemetry.http import Probes
    from tests.cdp import Browser

    out = HttpOutput(port=0, streams=1, probes=Probes())
    try:
        out.stats({"frames_processed": 5, "frames_dropped": 0, "streams": []})
        with Browser(CHROMIUM, FLAGS, tmp_path / "profile") as br:
            br.call("Page.addScriptToEvaluateOnNewDocument", source=COUNTED)
            br.open(f"http://127.0.0.1:{out.port}/")
            br.wait("document.getElementById('stats').textContent.startsWith('frames   5')")
            asked = "window.asked.filter(u=>u==='/config').length"
            br.wait(f"{asked}===1")
            time.sleep(5.0)  # two more of its periods: it asked once and stopped
            assert br.js(asked) == 1
            assert br.js("document.getElementById('config').hidden") is True
            assert br.js(TEXT.format("cfgversion")) == ""
    finally:
        out.close()
