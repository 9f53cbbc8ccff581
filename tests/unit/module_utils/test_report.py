"""llmb.report: the verdict from every expected (stage, host) result, durations, topology, HTML."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
from llmb.report import API_STAGES, PIPELINE_STAGES, collect, render_html, write_report
from llmbctl.results import record, timing
from llmbctl.serveresult import record_serve

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT / "docs/examples/verify-real-h200-x2"


def _deployment(run: Path, hosts=("node1", "node2"), api=("node1",)) -> None:
    doc = {"hosts": {h: {"address": f"10.0.0.{i + 1}", "plan": {"services": [
        {"name": "llmb-ray", "order": 10 if i == 0 else 20, "kind": "systemd", "api": None},
        *([{"name": "llmb-vllm", "order": 30, "kind": "systemd",
            "api": {"base_url": "http://10.0.0.1:8000/v1"}}] if h in api else []),
    ]}} for i, h in enumerate(hosts)}}
    run.mkdir(parents=True, exist_ok=True)
    (run / "deployment.json").write_text(json.dumps(doc))


def _ok(run: Path, stage: str, host: str, **data) -> None:
    record(str(run), stage, host, data)


def test_failed_recovery_run_missing_node2_is_never_ok(tmp_path):
    """The issue's case: recover.yml could not reach the replaced node2; node1 recorded every
    stage. The report must say FAILED and name every stage node2 is missing from."""
    run = tmp_path / "recover-1"
    _deployment(run)
    for stage in PIPELINE_STAGES:
        _ok(run, stage, "node1")
    rep = write_report(str(run), PIPELINE_STAGES)
    assert rep["ok"] is False and rep["verdict"] == "FAILED"
    missing = [(f["stage"], f["host"]) for f in rep["failed"]]
    # bench and accuracy run on the API host only
    assert missing == [(s, "node2") for s in PIPELINE_STAGES if s not in API_STAGES]
    assert all("unreachable" in f["why"] for f in rep["failed"])
    assert rep["results"]["verify"]["node2"]["status"] == "missing"
    md = (run / "report.md").read_text()
    assert "Verdict: **FAILED**" in md and "MISSING" in md and "OK**" not in md


def test_missing_host_fails_even_without_the_stage_list(tmp_path):
    """Run alone (report.yml after a verify.yml run), the stages with any result are expected on
    every host of the deployment: one host's row is not an OK."""
    run = tmp_path / "r"
    _deployment(run)
    _ok(run, "verify", "node1")
    rep = collect(run)
    assert rep["expected_stages"] == ["verify"]
    assert rep["ok"] is False and rep["failed"][0]["host"] == "node2"


def test_all_expected_results_ok_is_ok_and_a_failed_one_is_not(tmp_path):
    run = tmp_path / "r"
    _deployment(run)
    for stage in PIPELINE_STAGES:
        for host in ("node1", "node2"):
            if stage not in API_STAGES or host == "node1":
                _ok(run, stage, host)
    assert write_report(str(run), PIPELINE_STAGES)["verdict"] == "OK"
    record(str(run), "serve", "node2", {"ok": False, "error": "llmb-ray exited"})
    rep = write_report(str(run), PIPELINE_STAGES)
    assert rep["ok"] is False and rep["failed"] == [{"stage": "serve", "host": "node2", "why": "llmb-ray exited"}]


def test_empty_run_and_unreadable_result_are_failures(tmp_path):
    run = tmp_path / "r"
    _deployment(run)
    assert collect(run)["ok"] is False  # nothing expected was recorded: never OK
    assert collect(run, PIPELINE_STAGES)["expected"] == 12  # 5 stages x 2 hosts + bench and accuracy on node1
    (run / "verify").mkdir()
    (run / "verify" / "node1.json").write_text("{half")
    rep = collect(run)
    assert rep["ok"] is False and "unreadable result" in rep["failed"][0]["why"]


def test_report_json_keeps_the_expected_stages_for_a_rerender(tmp_path):
    run = tmp_path / "r"
    _deployment(run)
    _ok(run, "verify", "node1")
    _ok(run, "verify", "node2")
    write_report(str(run), PIPELINE_STAGES)
    assert collect(run)["expected_stages"] == PIPELINE_STAGES  # `llmb report RUN` re-renders the same verdict
    assert collect(run)["ok"] is False


def test_durations_from_the_stage_start(tmp_path):
    import datetime as dt

    t0 = dt.datetime(2026, 11, 24, 1, 0, 0, tzinfo=dt.UTC)
    t = timing("2026-11-24T01:00:00.000000Z", now=t0 + dt.timedelta(seconds=42.5))
    assert t == {"finished": "2026-11-24T01:00:42.500Z", "started": "2026-11-24T01:00:00.000Z", "duration_s": 42.5}
    assert timing("not a time", now=t0) == {"finished": "2026-11-24T01:00:00.000Z"}
    run = tmp_path / "r"
    _deployment(run, hosts=("node1",))
    record(str(run), "weights", "node1", {}, started="2000-01-01T00:00:00Z")
    rep = collect(run)
    assert rep["results"]["weights"]["node1"]["duration_s"] > 1e8
    # the verify action's own record: started (ISO) and the file's time
    (run / "verify").mkdir()
    (run / "verify" / "node1.json").write_text(json.dumps({"ok": True, "started": "2000-01-01T00:00:00+00:00"}))
    assert collect(run)["results"]["verify"]["node1"]["duration_s"] > 1e8


def test_topology_of_a_real_verify_result_with_deviations(tmp_path):
    """The real 2x H200 run against a wrong expectation (NV8 expected, NV18 found)."""
    run = tmp_path / "r"
    (run / "verify").mkdir(parents=True)
    shutil.copy(REAL / "wrong-expectation/localhost.json", run / "verify/localhost.json")
    shutil.copy(REAL / "localhost.bandwidth.json", run / "verify/localhost.bandwidth.json")
    rep = collect(run)
    assert rep["hosts"] == ["localhost"]  # the bandwidth file is no host of its own
    (t,) = rep["topology"]
    assert t["devices"] == ["GPU0", "GPU1"]
    assert {(c["a"], c["b"], c["link"], c["deviation"]) for c in t["cells"]} == {
        ("GPU0", "GPU1", "NV18", True), ("GPU1", "GPU0", "NV18", True)}
    assert t["link_counts"] == {"NV18": 2}
    assert set(t["device_deviations"]) == {"GPU0", "GPU1"}  # links.GPU0/1: 18 active, 8 expected
    page = render_html(rep)
    assert page.count('class="pair dev"') == 2 and "expected NV8" in page


def _verify8(host: str, down: tuple[str, str] | None = None) -> dict:
    names = [f"GPU{i}" for i in range(8)]
    matrix = {a: {b: "NV18" for b in names if b != a} for a in names}
    checks = []
    if down:
        matrix[down[0]][down[1]] = matrix[down[1]][down[0]] = "NV17"
        checks.append({"id": f"interconnect.{down[0]}-{down[1]}", "ok": False, "expected": "NV18", "found": "NV17",
                       "hint": "reseat"})
    return {"host": host, "ok": not down, "platform": "h200-hgx8", "checks": checks, "facts": {
        "vendor": "nvidia", "driver_version": "580.95.05", "matrix": matrix,
        "devices": [{"name": n, "index": i, "numa_node": i // 4} for i, n in enumerate(names)],
        "nics": [{"name": f"mlx5_{i}", "nearest": {f"GPU{2 * i}": "PIX", f"GPU{2 * i + 1}": "PXB"}} for i in range(4)]}}


def test_html_matrix_has_one_cell_per_device_pair(tmp_path):
    run = tmp_path / "r"
    _deployment(run)
    (run / "verify").mkdir()
    (run / "verify/node1.json").write_text(json.dumps(_verify8("node1")))
    (run / "verify/node2.json").write_text(json.dumps(_verify8("node2", down=("GPU2", "GPU5"))))
    rep = write_report(str(run))
    page = (run / "report.html").read_text()
    assert page.count('class="pair ') == 2 * 8 * 7
    assert page.count('class="pair dev"') == 2  # GPU2-GPU5 and GPU5-GPU2 on node2
    assert rep["topology"][1]["numa"] == {"0": ["GPU0", "GPU1", "GPU2", "GPU3"], "1": ["GPU4", "GPU5", "GPU6", "GPU7"]}
    assert rep["topology"][0]["rails"][0] == {"nic": "mlx5_0", "devices": ["GPU0", "GPU1"]}
    assert "<script" not in page and "http" not in page.split("<body>")[0]  # self-contained


def test_html_escapes_what_the_results_hold(tmp_path):
    run = tmp_path / "r"
    _deployment(run, hosts=("node1",))
    record(str(run), "serve", "node1", {"ok": False, "error": "<img src=x onerror=alert(1)>"})
    page = render_html(collect(run))
    assert "<img" not in page and "&lt;img src=x" in page


def test_weights_serve_bench_sections(tmp_path):
    run = tmp_path / "r"
    _deployment(run)
    record(str(run), "weights", "node2", {"source": "peer", "fetch": {
        "fetched": ["a", "b"], "fetched_bytes": 2_000_000_000, "fetch_seconds": 4.0,
        "verify": {"hashed_bytes": 2_000_000_000, "seconds": 2.0}}})
    record(str(run), "serve", "node1", {"healthy": [{"service": "llmb-vllm", "waited_s": 12.5}]})
    record(str(run), "bench", "node1", {"runs": [{"tool": "vllm bench serve", "output_throughput": 950.0,
                                                  "thresholds": {"output_throughput": ">= 1000"}}]})
    rep = write_report(str(run))
    w = rep["weights"]["node2"]
    assert (w["source"], w["fetched_files"], w["fetch_mb_s"], w["verify_mb_s"]) == ("peer", 2, 500.0, 1000.0)
    assert [r["service"] for r in rep["serve"]["start_order"]] == ["llmb-ray", "llmb-ray", "llmb-vllm"]
    assert [r["order"] for r in rep["serve"]["start_order"]] == [10, 20, 30]
    page = (run / "report.html").read_text()
    assert "12.5 s" in page and "&gt;= 1000" in page and "2.0 GB" in page


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(not CHROMIUM, reason="no chromium (Debian: apt-get install chromium; .ci/run installs it)")
def test_report_html_in_headless_chromium(tmp_path):
    """The rendered page (the browser's DOM dump) holds the verdict and one cell per device pair;
    the screenshot is kept under artifacts/tests/report-html/."""
    run = tmp_path / "r"
    _deployment(run)
    (run / "verify").mkdir()
    (run / "verify/node1.json").write_text(json.dumps(_verify8("node1")))
    (run / "verify/node2.json").write_text(json.dumps(_verify8("node2", down=("GPU2", "GPU5"))))
    write_report(str(run), ["verify", "weights"])
    page = (run / "report.html").resolve()
    out = ROOT / "artifacts/tests/report-html"
    out.mkdir(parents=True, exist_ok=True)
    profile = tmp_path / "chromium-profile"
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", "--no-first-run"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    (out / "report.dom.html").write_text(dom.stdout)
    assert 'id="verdict"' in dom.stdout and "Verdict: FAILED" in dom.stdout
    assert dom.stdout.count('class="pair ') == 2 * 8 * 7
    assert dom.stdout.count('data-pair="GPU2-GPU5"') == 2  # one per host
    shot = out / "report.png"
    shot.unlink(missing_ok=True)
    sc = subprocess.run([*base, "--window-size=1400,2400", "--hide-scrollbars", f"--screenshot={shot}", page.as_uri()],
                        capture_output=True, text=True, timeout=120)
    assert sc.returncode == 0, sc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


@pytest.mark.skipif(not CHROMIUM, reason="no chromium (Debian: apt-get install chromium; .ci/run installs it)")
def test_refused_inventory_report_in_headless_chromium(tmp_path):
    """Stage 0 refused the inventory (deployment.json planned: false): the page says so and lists
    every problem with its fix, and has no row of "no result" per host and stage (issue 26)."""
    run = tmp_path / "refused"
    run.mkdir()
    problems = [
        {"check": "parallelism", "message": "TP x PP = 16 x 1 = 16 devices, but the inventory has 1 node x 8",
         "found": "llmb_tensor_parallel: 16", "expected": "TP x PP <= 8", "fix": "lower TP/PP", "host": None},
        {"check": "yaml-duplicate-key", "message": "hosts.yml:7: the key all.vars.x is given twice",
         "found": None, "expected": None, "fix": "keep one x <b>", "host": None},
    ]
    (run / "deployment.json").write_text(json.dumps({"planned": False, "problems": problems,
                                                     "hosts": {"gpu-h100-01": {}}}))
    rep = write_report(str(run), PIPELINE_STAGES)
    assert rep["verdict"] == "FAILED" and not rep["ok"] and rep["failed"] == []
    page = (run / "report.html").resolve()
    profile = tmp_path / "chromium-profile"
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", "--no-first-run"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    out = ROOT / "artifacts/tests/report-html"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report-refused.dom.html").write_text(dom.stdout)
    assert "Verdict: FAILED" in dom.stdout
    assert "stage 0 refused the inventory before any host was contacted" in dom.stdout
    assert dom.stdout.count('class="problem"') == 2
    assert "[parallelism] TP x PP = 16 x 1 = 16 devices" in dom.stdout and "fix: lower TP/PP" in dom.stdout
    assert "keep one x &lt;b&gt;" in dom.stdout  # escaped, not markup
    assert "no result" not in dom.stdout and 'id="stages"' not in dom.stdout



def test_serve_time_to_healthy_says_the_compile_cache(tmp_path):
    """The serve record's compile_cache (roles/serve/tasks/report.yml) beside each time to healthy, in
    report.md and report.html; an older record without it still renders the time alone."""
    run = tmp_path / "r"
    _deployment(run, api=("node1", "node2"))
    record(str(run), "serve", "node1", {"healthy": [["llmb-ray", 2.0], ["llmb-vllm", 124.6]],
                                        "compile_cache": {"llmb-vllm": "cold"}})
    record(str(run), "serve", "node2", {"healthy": [["llmb-vllm", 31.5]]})  # older record: no cache state
    rep = write_report(str(run))
    assert rep["serve"]["healthy"]["node1"][1] == {"service": "llmb-vllm", "waited_s": 124.6, "since_start_s": None,
                                                   "compile_cache": "cold"}
    md = (run / "report.md").read_text()
    assert "- llmb-vllm on node1: healthy after 124.6 s (compile cache cold)" in md
    assert "- llmb-ray on node1: healthy after 2 s\n" in md
    assert "- llmb-vllm on node2: healthy after 31.5 s\n" in md
    page = (run / "report.html").read_text()
    assert "<td>124.6 s (compile cache cold)</td>" in page and "<td>31.5 s</td>" in page


def test_serve_start_history_medians_per_compile_cache_state(tmp_path):
    """The serve record's ``starts`` (llmbctl.serveresult.record_serve: every start recorded in this
    artifacts directory): per host and service, the median time to healthy of each compile cache state
    with its count, in report.json, report.md and report.html; a run that started nothing (the converged
    fast path: healthy []) still shows the history."""
    run = tmp_path / "r"
    _deployment(run, api=("node1", "node2"))
    times = {"cold": [250.1, 260.5], "warm": [160.2, 168.6, 171.0], "peer": [201.0]}
    for state in ("cold", "warm", "peer"):
        for t in times[state]:
            record_serve(str(run), "node1", {"healthy": [["llmb-vllm", t]], "compile_cache": {"llmb-vllm": state},
                                             "started_services": ["llmb-vllm"]})
    record_serve(str(run), "node2", {"healthy": [["llmb-vllm", 40.0]], "compile_cache": {},  # no state known
                                     "started_services": ["llmb-vllm"]})
    for host in ("node1", "node2"):  # the converged re-run: nothing started
        record_serve(str(run), host, {"healthy": [], "compile_cache": {}})
    rep = write_report(str(run))
    assert rep["serve"]["healthy"] == {}  # this run started nothing
    (vllm,) = rep["serve"]["starts"]["node1"]
    assert vllm["service"] == "llmb-vllm"
    want = [(s, statistics.median(times[s]), len(times[s])) for s in ("cold", "warm", "peer")]
    assert [(g["compile_cache"], g["median_s"], g["count"]) for g in vllm["groups"]] == \
        [(s, pytest.approx(m), n) for s, m, n in want]
    assert json.loads((run / "report.json").read_text())["serve"]["starts"] == rep["serve"]["starts"]
    md = (run / "report.md").read_text()
    cold, warm, peer = (f"{m:g} s" for _, m, _ in want)  # 255.3 s (the mean of the two), 168.6 s, 201 s
    assert cold == "255.3 s" and warm == "168.6 s"
    assert (f"- llmb-vllm on node1, starts recorded: cold {cold} (median of 2), warm {warm} (median of 3), "
            f"peer {peer} (1 start)\n") in md
    assert "- llmb-vllm on node2, starts recorded: unknown 40 s (1 start)\n" in md
    page = (run / "report.html").read_text()
    table = page[page.index('<table id="serve-starts">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr><td>node1</td><td>llmb-vllm</td>") == 3
    assert f"<td>cold</td><td>{cold}</td><td>2</td>" in table and f"<td>warm</td><td>{warm}</td><td>3</td>" in table
    assert f"<td>peer</td><td>{peer}</td><td>1</td>" in table and "<td>unknown</td><td>40 s</td><td>1</td>" in table


def test_serve_start_history_that_is_not_the_writers_shows_nothing(tmp_path):
    run = tmp_path / "r"
    _deployment(run)
    record(str(run), "serve", "node1", {"healthy": [["llmb-vllm", 10.0]], "starts": [{"service": "<x>", "waited_s": "soon"}]})
    record(str(run), "serve", "node2", {"healthy": [], "starts": "everything"})
    rep = write_report(str(run))
    assert rep["serve"]["starts"] == {} and "starts recorded" not in (run / "report.md").read_text()
    assert 'id="serve-starts"' not in (run / "report.html").read_text()


def test_serve_time_to_healthy_is_from_the_start_where_the_start_is_known(tmp_path):
    """A group's rank 0 is health-waited after every level started: 170 s of wait on 2x H200 where the group
    took 255 s from rank 0's start. The record's since_start_s (llmb_service_ready) is what the report says."""
    run = tmp_path / "r"
    _deployment(run, api=("node1", "node2"))
    record(str(run), "serve", "node1", {"healthy": [["llmb-vllm", 170.2]], "compile_cache": {"llmb-vllm": "cold"},
                                        "since_start_s": {"llmb-vllm": 255.3}})
    rep = write_report(str(run))
    assert rep["serve"]["healthy"]["node1"][0]["since_start_s"] == 255.3
    md = (run / "report.md").read_text()
    assert "- llmb-vllm on node1: healthy 255.3 s after its start (compile cache cold)" in md
    assert "170.2" not in md.split("Serve", 1)[-1].split("starts recorded", 1)[0]
    assert "<td>255.3 s from its start (compile cache cold)</td>" in (run / "report.html").read_text()
