"""The replay's modules compiled to C by mypyc, and the guard that they run only while they are
exactly what the sources say.

Why: `whatif --method replay` spends most of a 10 M-event report inside the core, the runtime's
driver and the SDK's protocol. Compiled by mypyc from the same typed sources, they replay
about 30 % faster and give the same outcomes (tests/unit/test_compiled_replay.py compares them
on random timelines, tests/spark/test_compiled_whatif.py two whole `whatif` runs). Nothing else
uses them: the server and the SDK stay pure Python.

Why a directory of its own, checked by hashes: in an editable install, an extension built in
place (`hub.*.so` next to `hub.py`) wins over the source *even after the source is edited*, so
a report would silently replay yesterday's core. `build()` writes the extensions under
`BUILD_DIR` (`.compiled/` at the top of the checkout) with a manifest of the sha256 of every
source it compiled. `activate()` puts them ahead of the sources (a `sys.meta_path` finder)
only if every hash still matches, and then all of them or none: compiled modules call each
other natively, so a mix of old and new would not be the sources either. Otherwise it says
why not and the replay runs the sources, slower and correct.

`./dev compile`, `./dev setup` and `./dev test` build it (65-90 s on 2 cores; again only when a
source changed); `python -m spark_analysis.compiled_replay build|status` by hand.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

#: the top of the checkout (or site-packages): the packages are found under it
ROOT = Path(__file__).resolve().parents[1]
#: where `build()` writes, per interpreter (the extensions are only for the one that built them)
BUILD_DIR = Path(os.environ.get("NOTIFY_COMPILED_DIR") or ROOT / ".compiled")
#: the name of the shared library all the compiled modules live in
GROUP = "notify_replay"
#: the top-level names of the project's modules a failed load may have imported
_OURS = frozenset({"notify", "client_sdk", "state_transfer", "spark_analysis", f"{GROUP}__mypyc"})
#: the modules outside notify/core that the replay runs (the frame encoding, the memory log and
#: state transfer's bookkeeping too: called for every frame, write or deadline, they were most
#: of what the compiled replay still interpreted)
MORE = ("client_sdk/protocol.py", "client_sdk/requests.py", "notify/runtime/driver.py",
        "notify/runtime/frames.py", "notify/storage/memory.py", "spark_analysis/replay.py",
        "state_transfer/position.py", "state_transfer/relay.py", "state_transfer/uploads.py")


def sources() -> list[str]:
    """The source files compiled, relative to `ROOT`: every module of notify/core but its
    `__init__` (which only re-exports), and the replay's other hot modules."""
    core = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "notify" / "core").glob("*.py")
                  if p.name != "__init__.py")
    return [*core, *MORE]


def module_of(source: str) -> str:
    return source.removesuffix(".py").replace("/", ".")


def _out() -> Path:
    return BUILD_DIR / sys.implementation.cache_tag


def _hashes() -> dict[str, str]:
    return {s: hashlib.sha256((ROOT / s).read_bytes()).hexdigest() for s in sources()}


@dataclass(frozen=True)
class Status:
    """Whether the compiled modules run, and if not, why not (said to the user)."""

    compiled: bool
    reason: str


def status() -> Status:
    """Would `activate()` load the compiled modules? (Does not load them.)"""
    if os.environ.get("NOTIFY_COMPILED") == "0":
        return Status(False, "NOTIFY_COMPILED=0")
    try:
        manifest = json.loads((_out() / "manifest.json").read_text())
    except (OSError, ValueError):
        return Status(False, f"not built for this Python ({_out()}); "
                             "build it with `./dev compile`")
    try:
        now = _hashes()
    except OSError as e:  # sources in a zip (`--py-files`), say: nothing to check them by
        return Status(False, f"cannot read the sources to check the build: {e}")
    built: dict[str, str] = manifest.get("sources", {})
    changed = sorted(s for s in now.keys() | built.keys() if now.get(s) != built.get(s))
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return Status(False, f"stale: {', '.join(changed[:3])}{more} changed since the build; "
                             "rebuild it with `./dev compile`")
    return Status(True, f"compiled by mypyc {manifest.get('mypy', '?')} in {_out()}")


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules (and their shared library) by name, ahead of the sources."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(fullname, file)


_active: Status | None = None


def activate() -> Status:
    """Load the compiled modules in place of their sources, if `status()` allows and none of
    them is imported yet (a module imported from source stays so); idempotent. Returns what
    this process runs."""
    global _active
    if _active is not None:
        return _active
    st = status()
    names = [module_of(s) for s in sources()]
    if st.compiled and (early := [n for n in names if n in sys.modules]):
        st = Status(False, f"{early[0]} was imported before the compiled modules could be")
    if st.compiled:
        st = _load(names, st)
    _active = st
    return st


def _load(names: list[str], st: Status) -> Status:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    files = {n: _out() / (n.replace(".", "/") + suffix) for n in names}
    files[f"{GROUP}__mypyc"] = _out() / f"{GROUP}__mypyc{suffix}"
    finder = _Finder(files)
    before = set(sys.modules)
    sys.meta_path.insert(0, finder)
    try:
        for n in names:
            importlib.import_module(n)
            if not (getattr(sys.modules[n], "__file__", None) or "").endswith(suffix):
                raise ImportError(f"{n} was not loaded from {files[n]}")
    except ImportError as e:  # a broken build: the sources it is, in full
        sys.meta_path.remove(finder)
        # forget the project's modules it imported (notify.runtime.frames...), not the libraries'
        for n in sys.modules.keys() - before:
            if n.partition(".")[0] in _OURS:
                del sys.modules[n]
        return Status(False, f"the build does not load: {e}")
    return st


def loaded() -> bool:
    """Does this process run the compiled replay (whatever it asked for)?"""
    m = sys.modules.get("spark_analysis.replay")
    return m is not None and (getattr(m, "__file__", None) or "").endswith(
        sysconfig.get_config_var("EXT_SUFFIX"))


def build() -> Status:
    """Compile `sources()` with mypyc into `BUILD_DIR` and write the manifest last (a build
    that stops half-way has none, and is not used)."""
    import shutil
    import tempfile

    from mypy.version import __version__ as mypy_version
    from mypyc.build import mypycify
    from setuptools import setup  # type: ignore[import-untyped]

    out = _out()
    shutil.rmtree(out, ignore_errors=True)
    before = _hashes()
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="notify-mypyc-") as tmp:
        os.chdir(ROOT)  # mypyc names modules by their paths relative to here
        try:
            exts = mypycify(sources(), opt_level="3", multi_file=True, group_name=GROUP,
                            target_dir=f"{tmp}/c")
            setup(name=GROUP, ext_modules=exts,
                  script_args=["build_ext", "--build-lib", str(out), "--build-temp",
                               f"{tmp}/o", "-j", str(os.cpu_count() or 1), "-q"])
        finally:
            os.chdir(cwd)
    if _hashes() != before:
        return Status(False, "a source changed during the build; build again")
    (out / "manifest.json").write_text(json.dumps(
        {"mypy": mypy_version, "python": sys.version, "sources": before}, indent=1))
    return status()


def main(argv: list[str] | None = None) -> int:
    cmd = (argv if argv is not None else sys.argv[1:]) or ["status"]
    if cmd[0] == "build" and len(cmd) == 1:
        st = status()
        if not st.compiled:
            st = build()
    elif cmd[0] == "status" and len(cmd) == 1:
        st = status()
    else:
        print("usage: python -m spark_analysis.compiled_replay {build|status}", file=sys.stderr)
        return 2
    print(("compiled: " if st.compiled else "not compiled: ") + st.reason)
    return 0 if st.compiled else 1


if __name__ == "__main__":
    sys.exit(main())
