"""Our downloader's threads, as many at once as each origin allows.

The careful path of ``gpu_ci.conda.fetch`` (credentials, proxies, failed streams) and
``engine: conda`` download here; rattler's streams have their own gates (``streams``)."""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator

from gpu_ci import cpus
from gpu_ci.conda.streams import WIDE
from gpu_ci.downloads import Download, Downloader, Fetched, default
from gpu_ci.retry import RetryPolicy
from gpu_ci.urls import origin

__all__ = ["Permits", "download_all", "downloaded"]


class Permits:
    """Our downloader's downloads per origin: ``narrow`` at once until one of its responses
    shows that its server keeps connections alive (``verdicts``, asked of the
    routed URL, where the connection goes), then ``wide``; no probe: the downloads' own
    answers tell. An origin that closes connections stays ``narrow``."""

    def __init__(self, narrow: int, wide: int, downloader: Downloader) -> None:
        self.narrow, self.wide, self.downloader = narrow, wide, downloader
        self.verdicts = downloader.verdicts
        self._lock = threading.Lock()
        self._origins: dict[tuple[str, str, int], threading.Semaphore] = {}
        self._wide: set[tuple[str, str, int]] = set()
        self.widened = False
        """An origin keeps connections alive: ``wide`` downloads in all from now on."""
        self.stopped = False
        """A download failed: one still waiting for its origin's permit never starts."""

    def _of(self, url: str) -> threading.Semaphore:
        key = origin(url)
        with self._lock:
            permits = self._origins.get(key)
            if permits is None:
                permits = self._origins[key] = threading.Semaphore(self.narrow)
        self._widen_if_kept(url)
        return permits

    def _widen_if_kept(self, url: str) -> None:
        if self.narrow >= self.wide or not self.verdicts.of(url):
            return
        key = origin(url)
        with self._lock:
            if key in self._wide:
                return
            self._wide.add(key)
            self._origins[key].release(self.wide - self.narrow)
            self.widened = True

    def run(self, item: Download, policy: RetryPolicy) -> Fetched:
        url = self.downloader.route(item.url).url
        with self._of(url):
            if self.stopped:
                from concurrent.futures import CancelledError

                raise CancelledError(f"{item.label}: not started, an earlier download failed")
            got = self.downloader.fetch(item, policy)
        self._widen_if_kept(url)
        return got


def downloaded(
    items: list[Download],
    todo: list[int],
    policy: RetryPolicy,
    narrow: int = 0,
    downloader: Downloader | None = None,
) -> Iterator[tuple[int, Fetched | BaseException]]:
    """Each of ``todo`` fetched by our downloader, as it completes.

    Two threads per core, at most 8: more on a small runner convoy on the GIL with the
    extraction feeders (measured on 2 cores: 8 threads 0.47-1.43 s for 150 packages, 4 a
    steady 0.44 s). ``WIDE`` in all once a response shows an origin keeps connections alive
    (``Permits``): against a server that answers each GET late (Nagle's algorithm, a CDN
    in another region) threads wait, they do not convoy. Threads are added only then, each
    with its own kept-alive connection; a server that closes every connection never sees
    more than ``narrow`` at once. After an error no other download starts. ``narrow``: that
    default, or fewer."""
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    narrow = narrow or max(1, min(8, 2 * cpus.usable(), len(todo)))
    wide = max(narrow, min(WIDE, len(todo)))
    permits = Permits(narrow, wide, Downloader() if downloader is None else downloader)
    queue = collections.deque(todo)
    pools: list[ThreadPoolExecutor] = []
    load: list[int] = []
    pending: dict[Future[Fetched], tuple[int, int]] = {}
    failed = False
    with contextlib.ExitStack() as stack:

        def pool_with_room() -> int | None:
            sizes = [narrow] + ([permits.wide - narrow] if permits.widened else [])
            for k, size in enumerate(sizes):
                if k == len(pools):
                    pools.append(stack.enter_context(ThreadPoolExecutor(size)))
                    load.append(0)
                if load[k] < size:
                    return k
            return None

        while queue or pending:
            while queue and not failed and (k := pool_with_room()) is not None:
                index = queue.popleft()
                pending[pools[k].submit(permits.run, items[index], policy)] = (index, k)
                load[k] += 1
            if not pending:
                break
            # a timeout, to start more downloads soon after an origin proves kept alive
            done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            for future in done:
                index, k = pending.pop(future)
                load[k] -= 1
                try:
                    got: Fetched | BaseException = future.result()
                except BaseException as exc:  # the caller reports it
                    failed = permits.stopped = True
                    got = exc
                # outside the try: a consumer that stops (GeneratorExit here) closes the pools
                yield index, got


def download_all(
    items: list[Download], policy: RetryPolicy, downloader: Downloader | None = None
) -> list[Fetched]:
    """Every archive downloaded and verified by our downloader (``engine: conda``, which
    extracts them itself), in ``items``' order; the first error once none is running."""
    results: dict[int, Fetched] = {}
    error: BaseException | None = None
    everything = list(range(len(items)))
    for index, got in downloaded(items, everything, policy, downloader=downloader or default()):
        if isinstance(got, BaseException):
            error = error or got
        else:
            results[index] = got
    if error is not None:
        raise error
    return [results[i] for i in range(len(items))]
