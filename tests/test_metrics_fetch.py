"""`weights fetch` against a real HTTP server on 127.0.0.1 (stdlib http.server in a thread, with Range
support): a good file, a wrong-hash file, a 404, a connection dropped mid-file (resumed by Range on
the retry or the next run), a server slower than the timeout, archives, a mirror, a local folder,
and LPIPS loading a fetched AlexNet trunk. Test manifests are built here; the CLI tests use the real
one (through --mirror, or --dry-run which needs no network). Nothing leaves the machine."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import io
import json
import os
import re
import subprocess
import threading
import time
import urllib.parse
import zipfile
from pathlib import Path

import numpy as np
import pytest

from lowbit_video.errors import UserError
from lowbit_video.metrics import fetch as fetch_mod
from lowbit_video.metrics import weights
from lowbit_video.metrics.fetch import Options, Reporter, fetch, fetch_entries, select
from lowbit_video.metrics.registry import list_metrics
from lowbit_video.metrics.weights import MANIFEST, WeightFile, check, missing_for

REPO = Path(__file__).resolve().parent.parent
CLI = REPO / ".venv" / "bin" / "lowbit-video"
ALEX_REL = "torch/hub/checkpoints/alexnet-owt-7be5be79.pth"


def blob(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet test output
        pass

    def do_GET(self) -> None:
        srv = self.server
        path = urllib.parse.unquote(urllib.parse.urlparse(self.path).path)
        rng = self.headers.get("Range")
        srv.log.append((path, rng))
        body = srv.files.get(path)
        if body is None:
            self.send_error(404)
            return
        if path in srv.slow:
            time.sleep(srv.slow[path])
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if m:
            start = int(m.group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        rest = body[start:]
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        try:
            if srv.drops.get(path, 0) > 0:  # promise the whole rest, send half, hang up
                srv.drops[path] -= 1
                self.wfile.write(rest[: len(rest) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(rest)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the slow case)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.drops: dict[str, int] = {}
        self.slow: dict[str, float] = {}
        self.log: list[tuple[str, str | None]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def requests(self, path: str) -> list[str | None]:
        return [r for p, r in self.log if p == path]


@pytest.fixture
def server():
    srv = _Server()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(autouse=True)
def _fresh_memory_cache():
    weights._HashCache._memory.clear()
    yield
    weights._HashCache._memory.clear()


class Recorder(Reporter):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def file_started(self, entry, source, total, done):
        self.events.append(("started", entry.key, total, done))

    def retrying(self, entry, attempt, attempts, why, wait):
        self.events.append(("retry", entry.key, attempt, attempts, why, wait))

    def file_done(self, outcome):
        self.events.append(("done", outcome.key, outcome.state))


FAST = Options(timeout=2.0, retries=2, backoff=0.5, chunk=4096)


def entry(key: str, rel: str, url: str | None, digest: str | None, size: int | None = None, **kw) -> WeightFile:
    return WeightFile(key, rel, ("fake_metric",), digest, size, "test fixture", url=url, **kw)


def run(entries, root, **kw):
    sleeps: list[float] = []
    rec = Recorder()
    opts = kw.pop("options", FAST)
    outs = fetch_entries(entries, root, options=opts, reporter=rec, sleep=sleeps.append, **kw)
    return outs, rec, sleeps


# --------------------------------------------------------------------------------- the cases


def test_a_good_file_is_fetched_verified_and_placed_and_not_fetched_again(server, tmp_path):
    data = blob(50_000, 1)
    server.files["/w/good.bin"] = data
    man = (entry("good", "sub/good.bin", server.url + "/w/good.bin", sha(data), len(data)),)
    (o,), rec, sleeps = run(man, tmp_path)
    assert (o.state, o.size, o.sha256, o.hash) == ("fetched", 50_000, sha(data), "published")
    assert (tmp_path / "sub/good.bin").read_bytes() == data
    assert not (tmp_path / "sub/good.bin.part").exists()
    assert not (tmp_path / "sub/good.bin.sha256.json").exists()  # a published hash is not recorded
    assert ("started", "good", 50_000, 0) in rec.events and sleeps == []
    (st,) = check(tmp_path, man)
    assert st.state == "present" and st.hash_source == "published"
    (o2,), _, _ = run(man, tmp_path)
    assert o2.state == "present"
    assert server.requests("/w/good.bin") == [None]  # one request in all


def test_a_wrong_hash_is_deleted_and_reported_never_placed(server, tmp_path):
    data = blob(10_000, 2)
    server.files["/bad.bin"] = data
    wrong = sha(b"something else")
    man = (entry("bad", "bad.bin", server.url + "/bad.bin", wrong),)
    (o,), _, _ = run(man, tmp_path)
    assert o.state == "failed"
    assert f"does not match the published {wrong[:16]}" in o.detail and "deleted" in o.detail
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == []  # no file, no .part
    assert "missing bad.bin" in missing_for("fake_metric", tmp_path, man)


def test_a_wrong_size_is_deleted(server, tmp_path):
    server.files["/s.bin"] = blob(1000, 3)
    (o,), _, _ = run((entry("s", "s.bin", server.url + "/s.bin", None, size=999),), tmp_path)
    assert o.state == "failed" and "1000 bytes, expected 999" in o.detail
    assert not (tmp_path / "s.bin").exists() and not (tmp_path / "s.bin.part").exists()


def test_404_fails_at_once_and_every_other_file_is_still_tried(server, tmp_path):
    data = blob(3000, 4)
    server.files["/ok.bin"] = data
    man = (entry("gone", "gone.bin", server.url + "/gone.bin", None),
           entry("ok", "ok.bin", server.url + "/ok.bin", sha(data)))
    outs, _, sleeps = run(man, tmp_path)
    assert [o.state for o in outs] == ["failed", "fetched"]
    assert "HTTP 404" in outs[0].detail and "\n" not in outs[0].detail
    assert server.requests("/gone.bin") == [None] and sleeps == []  # a 404 is not retried


def test_a_dropped_connection_is_resumed_with_range_on_the_retry(server, tmp_path):
    data = blob(200_000, 5)
    server.files["/drop.bin"] = data
    server.drops["/drop.bin"] = 1
    man = (entry("drop", "drop.bin", server.url + "/drop.bin", sha(data), len(data)),)
    (o,), rec, sleeps = run(man, tmp_path)
    assert o.state == "fetched" and (tmp_path / "drop.bin").read_bytes() == data
    assert server.requests("/drop.bin") == [None, "bytes=100000-"]
    assert ("started", "drop", 200_000, 100_000) in rec.events  # the retry started from the kept half
    (retry,) = [e for e in rec.events if e[0] == "retry"]
    assert retry[2:4] == (1, 3) and "100000 of 200000" in retry[4]
    assert sleeps == [0.5]


def test_a_dropped_download_without_retries_is_resumed_by_the_next_run(server, tmp_path):
    data = blob(80_000, 6)
    server.files["/drop.bin"] = data
    server.drops["/drop.bin"] = 1
    man = (entry("drop", "drop.bin", server.url + "/drop.bin", sha(data)),)
    once = Options(timeout=2.0, retries=0, backoff=0.0, chunk=4096)
    (o,), _, _ = run(man, tmp_path, options=once)
    assert o.state == "failed" and "drop.bin.part kept" in o.detail
    assert not (tmp_path / "drop.bin").exists()
    assert (tmp_path / "drop.bin.part").read_bytes() == data[:40_000]
    assert "a partial download drop.bin.part is there" in check(tmp_path, man)[0].detail
    (o2,), _, _ = run(man, tmp_path, options=once)
    assert o2.state == "fetched" and (tmp_path / "drop.bin").read_bytes() == data
    assert server.requests("/drop.bin") == [None, "bytes=40000-"]


def test_a_kept_part_of_another_file_version_is_thrown_away_and_fetched_whole(server, tmp_path):
    data = blob(30_000, 7)
    server.files["/v.bin"] = data
    (tmp_path / "v.bin.part").write_bytes(b"\x00" * 1000)  # left by an older version of the file
    (o,), _, _ = run((entry("v", "v.bin", server.url + "/v.bin", sha(data)),), tmp_path)
    assert o.state == "fetched" and (tmp_path / "v.bin").read_bytes() == data
    assert server.requests("/v.bin") == ["bytes=1000-", None]


def test_a_complete_part_is_not_downloaded_again(server, tmp_path):
    data = blob(5000, 8)
    server.files["/c.bin"] = data
    (tmp_path / "c.bin.part").write_bytes(data)  # complete, but the rename never happened
    (o,), _, _ = run((entry("c", "c.bin", server.url + "/c.bin", sha(data)),), tmp_path)
    assert o.state == "fetched" and (tmp_path / "c.bin").read_bytes() == data
    assert server.requests("/c.bin") == ["bytes=5000-"]  # answered 416: nothing more to send


def test_a_slow_server_times_out_after_the_retries_with_backoff(server, tmp_path):
    server.files["/slow.bin"] = blob(100, 9)
    server.slow["/slow.bin"] = 1.5
    opts = Options(timeout=0.3, retries=2, backoff=0.25, chunk=4096)
    t0 = time.monotonic()
    (o,), rec, sleeps = run((entry("slow", "slow.bin", server.url + "/slow.bin", None),), tmp_path, options=opts)
    assert o.state == "failed" and "timed out" in o.detail and "after 3 attempts" in o.detail
    assert sleeps == [0.25, 0.5]  # doubled each time
    assert len(server.requests("/slow.bin")) == 3
    assert time.monotonic() - t0 < 1.5 * 3  # each attempt gave up at the timeout, not at the server's pace
    assert not (tmp_path / "slow.bin").exists()


def test_a_file_without_a_published_hash_is_recorded_and_check_says_so(server, tmp_path):
    data = blob(4096, 10)
    server.files["/u.bin"] = data
    man = (entry("u", "m/u.bin", server.url + "/u.bin", None),)
    (o,), _, _ = run(man, tmp_path)
    assert (o.state, o.hash, o.sha256) == ("fetched", "recorded", sha(data))
    record = json.loads((tmp_path / "m/u.bin.sha256.json").read_text())
    assert record["sha256"] == sha(data) and record["size"] == 4096 and record["published"] is False
    assert record["source"] == server.url + "/u.bin"
    (st,) = check(tmp_path, man)
    assert st.state == "present" and st.hash_source == "recorded"
    assert "hash recorded locally, not published" in st.detail
    path = tmp_path / "m/u.bin"
    stat = path.stat()
    path.write_bytes(blob(4096, 11))  # changed after the fetch
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000))
    (st,) = check(tmp_path, man)
    assert st.state == "bad-hash" and "recorded at fetch" in st.detail
    (o2,), _, _ = run(man, tmp_path)  # fetch replaces the changed file
    assert o2.state == "fetched" and path.read_bytes() == data


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_archive_member_and_archive_folder(server, tmp_path):
    model = blob(2000, 12)
    server.files["/models.zip"] = _zip({"models/raft-things.pth": model, "models/raft-small.pth": b"x"})
    server.files["/main.zip"] = _zip({"dino-main/hubconf.py": b"dependencies = []\n",
                                      "dino-main/utils/vit.py": b"# vit\n", "other/x": b"x"})
    man = (entry("raft", "vbench/raft_model/models/raft-things.pth", server.url + "/models.zip", sha(model),
                 member="models/raft-things.pth"),
           entry("code", "vbench/dino_model/facebookresearch_dino_main", server.url + "/main.zip", None,
                 kind="dir", member="dino-main/"))
    (tmp_path / man[1].relpath).mkdir(parents=True)  # an empty folder counts as missing and is replaced
    outs, _, _ = run(man, tmp_path)
    assert [o.state for o in outs] == ["fetched", "fetched"]
    assert (tmp_path / man[0].relpath).read_bytes() == model
    code = tmp_path / man[1].relpath
    assert sorted(str(p.relative_to(code)) for p in code.rglob("*") if p.is_file()) == ["hubconf.py", "utils/vit.py"]
    assert not (tmp_path / fetch_mod.DOWNLOADS).exists() or not any((tmp_path / fetch_mod.DOWNLOADS).iterdir())
    assert {s.state for s in check(tmp_path, man)} == {"present"}


def test_an_archive_with_unsafe_paths_is_refused(server, tmp_path):
    server.files["/evil.zip"] = _zip({"top/../../escape.txt": b"x"})
    man = (entry("code", "code", server.url + "/evil.zip", None, kind="dir", member="top/"),)
    (o,), _, _ = run(man, tmp_path)
    assert o.state == "failed" and "unsafe path" in o.detail
    assert not (tmp_path.parent / "escape.txt").exists() and not (tmp_path / "code").exists()


def test_a_mirror_serves_relative_paths_under_its_base(server, tmp_path):
    model = blob(3000, 13)
    # the same entries as above; the mirror has the file itself and a zip of the folder's contents
    server.files["/lab/vbench/raft_model/models/raft-things.pth"] = model
    server.files["/lab/vbench/dino_model/facebookresearch_dino_main.zip"] = _zip({"hubconf.py": b"# hub\n"})
    man = (entry("raft", "vbench/raft_model/models/raft-things.pth", "http://127.0.0.9:1/never", sha(model),
                 member="models/raft-things.pth"),
           entry("code", "vbench/dino_model/facebookresearch_dino_main", "http://127.0.0.9:1/never", None,
                 kind="dir", member="dino-main/"))
    outs, _, _ = run(man, tmp_path, mirror=server.url + "/lab/")
    assert [o.state for o in outs] == ["fetched", "fetched"]
    assert outs[0].source == server.url + "/lab/vbench/raft_model/models/raft-things.pth"
    assert (tmp_path / man[0].relpath).read_bytes() == model
    assert (tmp_path / man[1].relpath / "hubconf.py").read_bytes() == b"# hub\n"


def test_from_a_folder_copies_and_verifies(tmp_path):
    got, root = tmp_path / "downloads", tmp_path / "root"
    got.mkdir()
    good, other = blob(700, 14), blob(700, 15)
    (got / "a.pth").write_bytes(good)  # flat, by file name
    (got / "b.pth").write_bytes(other)
    (got / "models.zip").write_bytes(_zip({"models/r.pth": good}))  # the archive as downloaded
    man = (entry("a", "x/y/a.pth", None, sha(good)),
           entry("b", "x/b.pth", None, sha(good)),  # the wrong file under the right name
           entry("r", "r/models/r.pth", "https://example.invalid/models.zip", None, member="models/r.pth"),
           entry("c", "x/c.pth", None, None))
    outs, _, _ = run(man, root, from_dir=got)
    assert [o.state for o in outs] == ["fetched", "failed", "fetched", "failed"]
    assert (root / "x/y/a.pth").read_bytes() == good and outs[0].source == str(got / "a.pth")
    assert "does not match" in outs[1].detail and not (root / "x/b.pth").exists()
    assert (got / "b.pth").read_bytes() == other  # the user's file is left alone
    assert (root / "r/models/r.pth").read_bytes() == good and outs[2].hash == "recorded"
    assert outs[3].detail.startswith(f"not found in {got} (looked for x/c.pth, c.pth")


def test_from_a_folder_copies_folder_entries_as_folders_or_zips(tmp_path):
    got, root = tmp_path / "downloads", tmp_path / "root"
    (got / "models--bert-base-uncased" / "snapshots" / "abc").mkdir(parents=True)
    (got / "models--bert-base-uncased" / "snapshots" / "abc" / "vocab.txt").write_text("[PAD]\n")
    (got / "code.zip").write_bytes(_zip({"hubconf.py": b"# hub\n"}))
    man = (entry("bert", "huggingface/hub/models--bert-base-uncased", None, None, kind="dir"),
           entry("code", "vbench/code", "https://example.invalid/main.zip", None, kind="dir", member="dino-main/"))
    outs, _, _ = run(man, root, from_dir=got)
    assert [o.state for o in outs] == ["fetched", "fetched"]
    assert (root / man[0].relpath / "snapshots/abc/vocab.txt").read_text() == "[PAD]\n"
    assert (root / "vbench/code/hubconf.py").read_bytes() == b"# hub\n"
    assert {s.state for s in check(root, man)} == {"present"}


def test_dry_run_downloads_nothing(server, tmp_path):
    server.files["/d.bin"] = blob(10, 16)
    man = (entry("d", "d.bin", server.url + "/d.bin", None, size=10), entry("e", "e.bin", server.url + "/e", None),
           entry("f", "f", None, None, kind="dir"))
    outs, _, _ = run(man, tmp_path, dry_run=True)
    assert [(o.state, o.size) for o in outs] == [("planned", 10), ("planned", None), ("manual", None)]
    assert server.log == [] and not any(tmp_path.iterdir())
    doc = fetch_mod.summary(outs)
    assert (doc["bytes_planned"], doc["planned_size_unknown"]) == (10, 1)


def test_select_by_metric_key_or_all_and_the_errors():
    man = (WeightFile("a", "a", ("m1",), None, None, "s"), WeightFile("b", "b", ("m1", "m2"), None, None, "s"),
           WeightFile("c", "c", (), None, None, "s"))
    assert [w.key for w in select(["m2"], manifest=man)] == ["b"]
    assert [w.key for w in select(["m2,c", "m1"], manifest=man)] == ["a", "b", "c"]
    assert [w.key for w in select([], True, manifest=man)] == ["a", "b", "c"]
    for names, all_, msg in ((["nope"], False, "unknown metric 'nope'"), (["psnr"], False, "needs no weight files"),
                             ([], False, "or pass --all"), (["m1"], True, "not both")):
        with pytest.raises(UserError, match=msg):
            select(names, all_, manifest=man)
    assert [w.key for w in select(["lpips"])] == ["lpips-alexnet"]  # the real manifest by default


def test_every_missing_weight_reason_ends_with_its_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv(weights.ENV_VAR, str(tmp_path / "default"))
    for m in list_metrics():
        if not m.weights:
            continue
        reason = missing_for(m.name, tmp_path / "default")
        assert reason.endswith(f"; fix: lowbit-video weights fetch {m.name}"), reason
        elsewhere = missing_for(m.name, tmp_path / "other root")
        assert elsewhere.endswith(f"lowbit-video weights fetch {m.name} --weights-dir '{tmp_path / 'other root'}'")
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # named twice, it makes the reason longer than stored reasons may be
    clip_l, head = weights.entries_for("aesthetic_quality")
    full = len(f"missing {clip_l.relpath}; missing {head.relpath} (weights root {deep}); fix: "
               f"lowbit-video weights fetch aesthetic_quality --weights-dir {deep}")
    assert full > weights.REASON_MAX
    reason = missing_for("aesthetic_quality", deep)
    assert len(reason) == weights.REASON_MAX and reason.endswith(f"fetch aesthetic_quality --weights-dir {deep}")
    assert reason.startswith(f"missing {clip_l.relpath}; missing")


def test_lpips_runs_on_a_fetched_alexnet_trunk(server, tmp_path):
    import torch
    import torchvision

    from lowbit_video.metrics import lpips_metric

    torch.manual_seed(0)
    trunk = {k: v for k, v in torchvision.models.alexnet(weights=None).state_dict().items() if k.startswith("features.")}
    buf = io.BytesIO()
    torch.save(trunk, buf)
    data = buf.getvalue()
    server.files["/models/alexnet-owt-7be5be79.pth"] = data
    real = next(w for w in MANIFEST if w.key == lpips_metric.TRUNK_KEY)
    man = tuple(dataclasses.replace(w, sha256=sha(data), url=server.url + "/models/alexnet-owt-7be5be79.pth")
                if w.key == real.key else w for w in MANIFEST)
    root = tmp_path / "weights"
    assert lpips_metric.unavailable(root, man).endswith(f"weights fetch lpips --weights-dir {root}")
    (o,) = fetch(root, ["lpips"], manifest=man, options=FAST)
    assert o.state == "fetched" and (root / ALEX_REL).is_file()
    assert lpips_metric.unavailable(root, man) is None
    lpips_metric._CACHE.clear()
    model = lpips_metric.load_model(root, man)
    rng = np.random.default_rng(0)
    x, y = (rng.integers(0, 256, (2, 40, 48, 3), dtype=np.uint8) for _ in range(2))
    d = lpips_metric.lpips_distance(x, y, model)
    assert np.isfinite(d) and d > 0
    assert torch.equal(model.net.slice1._modules["0"].weight, trunk["features.0.weight"])
    assert lpips_metric.unavailable(root) is not None  # the real manifest still wants the real 7be5be79 file
    lpips_metric._CACHE.clear()


# ------------------------------------------------------------------------------------------ CLI


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed command, in its own process (what a user runs)."""
    return subprocess.run([str(CLI), "weights", *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


def invoke(*args: str):
    """The same command in-process (CliRunner): a process start costs seconds on a loaded machine."""
    from typer.testing import CliRunner

    from lowbit_video.cli import app

    res = CliRunner().invoke(app, ["weights", *args])
    res.returncode = res.exit_code
    return res


def test_cli_dry_run_all_lists_every_manifest_file_with_its_size_or_size_unknown(tmp_path):
    root = tmp_path / "empty"
    res = invoke("fetch", "--dry-run", "--all", "--weights-dir", str(root), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    listed = doc["planned"] + doc["manual"]
    assert sorted(o["relpath"] for o in listed) == sorted(w.relpath for w in MANIFEST)
    by_key = {o["key"]: o for o in listed}
    for w in MANIFEST:
        assert by_key[w.key]["size"] == w.size
    assert doc["bytes_planned"] == sum(w.size for w in MANIFEST if w.size is not None and w.url)
    assert doc["fetched"] == doc["failed"] == [] and not root.exists()
    text = cli("fetch", "--dry-run", "--all", "--weights-dir", str(root), env={"COLUMNS": "400"})
    assert text.returncode == 0, text.stderr
    rows = {line.split("│")[1].strip(): line for line in text.stdout.splitlines() if line.count("│") > 3}
    for w in MANIFEST:
        assert w.key in rows
        size_cell = rows[w.key].split("│")[3]
        assert ("size unknown" in size_cell) if w.size is None else ("1.4 MB" in size_cell)
    assert f"would fetch {len(doc['planned'])} of {len(MANIFEST)}: {doc['bytes_planned']} bytes" in text.stdout


def test_cli_fetch_through_a_mirror_with_the_real_manifest(server, tmp_path):
    root = tmp_path / "w"
    amt = blob(6000, 17)
    server.files["/m/vbench/amt_model/amt-s.pth"] = amt
    server.files["/m/" + ALEX_REL] = blob(6000, 18)  # not the published 7be5be79 file
    res = invoke("fetch", "motion_smoothness", "lpips", "--mirror", server.url + "/m", "--weights-dir", str(root),
              "--retries", "0", "--json")
    assert res.returncode == 2, (res.stdout, res.stderr)
    doc = json.loads(res.stdout)
    assert [o["key"] for o in doc["fetched"]] == ["amt-s"] and [o["key"] for o in doc["failed"]] == ["lpips-alexnet"]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: lpips-alexnet ({ALEX_REL}): sha256")
    assert not (root / ALEX_REL).exists() and (root / "vbench/amt_model/amt-s.pth").read_bytes() == amt
    chk = json.loads(invoke("check", "--weights-dir", str(root), "--json").stdout)
    (f,) = [f for f in chk["files"] if f["key"] == "amt-s"]
    assert (f["state"], f["hash"]) == ("present", "recorded") and "hash recorded locally, not published" in f["detail"]
    assert chk["metrics"]["lpips"]["unavailable"].endswith(f"lowbit-video weights fetch lpips --weights-dir {root}")


def test_cli_user_mistakes_are_one_line_and_exit_2(tmp_path):
    for args, msg in ((["fetch"], "or pass --all"), (["fetch", "nope"], "unknown metric 'nope'"),
                      (["fetch", "lpips", "--mirror", "ftp://x"], "http:// or https://"),
                      (["fetch", "lpips", "--from", str(tmp_path / "none")], "not a folder")):
        res = invoke(*args, "--weights-dir", str(tmp_path))
        assert res.returncode == 2 and res.stderr.startswith("error: ") and msg in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1


def test_cli_progress_is_plain_lines_where_stderr_is_not_a_terminal(server, tmp_path):
    root = tmp_path / "w"
    server.files["/m/vbench/amt_model/amt-s.pth"] = blob(6000, 19)
    res = invoke("fetch", "motion_smoothness", "--mirror", server.url + "/m", "--weights-dir", str(root))
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    url = server.url + "/m/vbench/amt_model/amt-s.pth"
    assert re.fullmatch(r"\[\s+\d+\.\d s\] weights fetch: amt-s: 6\.0 kB from " + re.escape(url), lines[0]), lines
    assert re.fullmatch(r"\[\s+\d+\.\d s\] weights fetch: amt-s: fetched, 6000 bytes, no published hash: "
                        r"sha256 recorded locally in amt-s\.pth\.sha256\.json", lines[-1]), lines
    assert "fetched 1 (6.0 kB), already present 0, failed 0" in res.stdout
    again = invoke("fetch", "motion_smoothness", "--mirror", server.url + "/m", "--weights-dir", str(root))
    assert again.returncode == 0 and again.stderr == ""
    assert "fetched 0 (0 B), already present 1, failed 0" in again.stdout


def test_cli_an_entry_without_a_download_source_is_a_warning_with_the_command(tmp_path, monkeypatch):
    import socket

    def refuse(*a, **k):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    res = invoke("fetch", "bert-base-uncased", "--weights-dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith("warning: bert-base-uncased (huggingface/hub/models--bert-base-uncased): no download source")
    assert f"HF_HOME={tmp_path}/huggingface huggingface-cli download bert-base-uncased" in line
    assert "failed 0" in res.stdout and "by hand  bert-base-uncased" in res.stdout
