"""The compiled replay (spark_analysis/compiled_replay.py) gives what the sources give, and it
never runs when it is not what the sources say.

The comparison needs the build (`./dev compile`; `./dev test` builds it and sets
NOTIFY_REQUIRE_COMPILED=1, so there it fails rather than skips when the build is missing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_analysis import compiled_replay

SAMPLE = Path(__file__).with_name("replay_sample.py")


def _run_sample(seed: int, groups: int, *, compiled: bool) -> dict:
    env = {**os.environ, "NOTIFY_COMPILED": "1" if compiled else "0"}
    out = subprocess.run([sys.executable, str(SAMPLE), str(seed), str(groups)], env=env,
                         capture_output=True, text=True, timeout=240, check=True,
                         cwd=compiled_replay.ROOT)
    result: dict = json.loads(out.stdout)
    return result


def _need_build() -> None:
    st = compiled_replay.status()
    if not st.compiled:
        if os.environ.get("NOTIFY_REQUIRE_COMPILED") == "1":
            pytest.fail(f"the compiled replay is required here: {st.reason}")
        pytest.skip(f"the compiled replay is not built: {st.reason}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2])
def test_compiled_and_pure_replays_give_the_same_outcomes(seed: int) -> None:
    _need_build()
    pure = _run_sample(seed, 150, compiled=False)
    fast = _run_sample(seed, 150, compiled=True)
    assert not pure["compiled"] and pure["hub"].endswith("hub.py")
    assert fast["compiled"], fast["reason"]
    assert fast["hub"].startswith(str(compiled_replay.BUILD_DIR)) and fast["hub"].endswith(".so")
    assert len(pure["rows"]) == 150 * 6
    # not vacuous: the sample removes members, merges and cancels changes
    assert sum(r["false_removals"] for r in pure["rows"]) > 0
    assert sum(r["cancelled"] for r in pure["rows"]) > 0
    assert fast["rows"] == pure["rows"]


def _fake_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: dict[str, str]) -> None:
    monkeypatch.setattr(compiled_replay, "BUILD_DIR", tmp_path)
    out = tmp_path / sys.implementation.cache_tag
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"mypy": "x", "sources": hashes}))


def test_a_build_of_other_sources_is_not_used(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    hashes = compiled_replay._hashes()
    _fake_build(tmp_path, monkeypatch, hashes)
    assert compiled_replay.status().compiled  # the manifest is all it checks before loading
    hashes["notify/core/hub.py"] = "0" * 64
    (tmp_path / sys.implementation.cache_tag / "manifest.json").write_text(
        json.dumps({"mypy": "x", "sources": hashes}))
    st = compiled_replay.status()
    assert not st.compiled and "stale: notify/core/hub.py changed" in st.reason


def test_a_new_core_module_makes_the_build_stale(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    hashes = compiled_replay._hashes()
    del hashes["notify/core/view.py"]  # as if view.py had been added after the build
    _fake_build(tmp_path, monkeypatch, hashes)
    st = compiled_replay.status()
    assert not st.compiled and "notify/core/view.py" in st.reason


def test_no_build_or_notify_compiled_0_means_the_sources(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_replay, "BUILD_DIR", tmp_path)
    st = compiled_replay.status()
    assert not st.compiled and "./dev compile" in st.reason
    _fake_build(tmp_path, monkeypatch, compiled_replay._hashes())
    monkeypatch.setenv("NOTIFY_COMPILED", "0")
    assert compiled_replay.status() == compiled_replay.Status(False, "NOTIFY_COMPILED=0")


def test_a_build_that_does_not_load_leaves_the_sources(tmp_path: Path) -> None:
    """A manifest that matches but extensions that are not there (a half-copied build): the
    process runs the sources, all of them, and says why."""
    code = ("import json, sys\n"
            "from spark_analysis import compiled_replay as c\n"
            "st = c.activate()\n"
            "import notify.core.hub, notify.runtime.frames as w\n"
            "print(json.dumps([st.compiled, st.reason, notify.core.hub.__file__,"
            " w.COMPILED_FRAMES]))\n")
    out = tmp_path / sys.implementation.cache_tag
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"sources": compiled_replay._hashes()}))
    env = {**os.environ, "NOTIFY_COMPILED_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60, check=True, cwd=compiled_replay.ROOT)
    compiled, reason, hub, frames = json.loads(r.stdout)
    assert not compiled and "does not load" in reason
    assert hub.endswith("notify/core/hub.py") and frames is False


def test_modules_imported_before_activation_stay_the_sources() -> None:
    code = ("import json\n"
            "import notify.core\n"
            "from spark_analysis import compiled_replay as c\n"
            "st = c.activate()\n"
            "print(json.dumps([st.compiled, st.reason]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True, cwd=compiled_replay.ROOT)
    compiled, reason = json.loads(r.stdout)
    assert not compiled
    # without a build it says that; with one, that the core came first
    assert "imported before" in reason or not compiled_replay.status().compiled


def test_sources_it_cannot_read_mean_the_sources(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor given the project as a zip (`--py-files`) has no files to hash: it replays
    the sources rather than fail the job."""
    _fake_build(tmp_path, monkeypatch, compiled_replay._hashes())
    monkeypatch.setattr(compiled_replay, "ROOT", tmp_path / "project.zip")
    st = compiled_replay.status()
    assert not st.compiled and "cannot read the sources" in st.reason
