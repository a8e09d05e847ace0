"""Development process runners, kept out of the product packages (`notify/`, `notify_chaos/`):
`./dev cluster` (`devcluster.py`), `./dev demo` (`devdemo.py`) and `noderun.py` (`notify serve`
as a child process, for the cluster tests and `./dev bench cluster`).

Not installed (pyproject's `packages.find` leaves it out, like `bench/` and `tests/`): it is
imported from the repository root, where `./dev` and `python -m pytest` run (`python -m
devtools.devcluster`). The `nats-server` launcher it uses is `notify_chaos.natsrun`, which
ships with the chaos tool because `notify-chaos` starts NATS clusters too.
"""
